"""What the sandbox and local platforms share: faults on member processes of this machine
(signals, faultfs under the data directory, nftables on loopback) and their load-time checks."""

INJECTORS: dict[str, str] = {
    "host-kill": "rsdrill.platforms.machine.disk:host_kill",
    "host-freeze": "rsdrill.platforms.machine.process:host_freeze",
    "disk-fault": "rsdrill.platforms.machine.disk:storage_fault",
    "iops-throttle": "rsdrill.platforms.machine.disk:storage_fault",
    "volume-detach": "rsdrill.platforms.machine.disk:storage_fault",
    "network-partition": "rsdrill.platforms.machine.network:network_partition",
    "zone-outage": "rsdrill.platforms.machine.zone:zone_outage",
    "network-degrade": "rsdrill.platforms.machine.degrade:network_degrade",
    "data-loss": "rsdrill.platforms.machine.data_loss:data_loss",
    "clock-skew": "rsdrill.platforms.machine.clock:clock_skew",
    "disk-fill": "rsdrill.platforms.machine.disk_fill:disk_fill",
    "cpu-starve": "rsdrill.platforms.machine.cgroup:cgroup_fault",
    "memory-pressure": "rsdrill.platforms.machine.cgroup:cgroup_fault",
}
"""Each fault kind a member process of this machine can be given → its injector factory."""
