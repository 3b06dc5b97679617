"""The Kubernetes resources a fault becomes: Chaos Mesh chaos objects and LitmusChaos engines,
built from the fault and the pods it targets. Pure functions (no API calls), so `rsdrill plan`
can show them exactly as a run would create them.
"""

from __future__ import annotations

import errno as errno_module
import ipaddress
import math
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from rsdrill.faults import (
    COMMAND_KINDS,
    CpuStarveFault,
    IopsThrottleFault,
    MemoryPressureFault,
    NetworkDegradeFault,
)
from rsdrill.platforms.kubernetes.options import (
    LITMUS_NETEM,
    KubernetesFault,
    KubernetesPlatform,
    engine_of,
)
from rsdrill.platforms.stress import cpu_workers

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment, Fault

MANAGED_BY = {"app.kubernetes.io/managed-by": "rsdrill"}
# Chaos Mesh also recovers the fault by itself this long after it should have been reverted:
# a dead man's switch for a run that died before `rsdrill recover` was run.
SAFETY_MARGIN_S = 120
# Each kind's Litmus experiment by scope (a fault's `kubernetes.litmus_experiment` overrides it).
LITMUS_DEFAULT = {
    "host-kill": {"member": "pod-delete", "node": "node-drain"},
    "disk-fill": {"member": "disk-fill"},
}
_DISK_METHODS = {"read": "read", "write": "write", "fsync": "fsync", "open": "open"}
_DIRECTION = {"both": "both", "inbound": "from", "outbound": "to"}


@dataclass(frozen=True)
class ResourceType:
    """A custom resource type, e.g. `podchaos.chaos-mesh.org` (kind PodChaos)."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}"


POD_CHAOS = ResourceType("chaos-mesh.org", "v1alpha1", "podchaos", "PodChaos")
IO_CHAOS = ResourceType("chaos-mesh.org", "v1alpha1", "iochaos", "IOChaos")
NETWORK_CHAOS = ResourceType("chaos-mesh.org", "v1alpha1", "networkchaos", "NetworkChaos")
BLOCK_CHAOS = ResourceType("chaos-mesh.org", "v1alpha1", "blockchaos", "BlockChaos")
TIME_CHAOS = ResourceType("chaos-mesh.org", "v1alpha1", "timechaos", "TimeChaos")
STRESS_CHAOS = ResourceType("chaos-mesh.org", "v1alpha1", "stresschaos", "StressChaos")
CHAOS_ENGINE = ResourceType("litmuschaos.io", "v1alpha1", "chaosengines", "ChaosEngine")
CHAOS_EXPERIMENT = ResourceType("litmuschaos.io", "v1alpha1", "chaosexperiments", "ChaosExperiment")
CHAOS_RESULT = ResourceType("litmuschaos.io", "v1alpha1", "chaosresults", "ChaosResult")


@dataclass(frozen=True)
class PodRef:
    """A member's pod (and, for node-level faults, the node it runs on; for a zone's
    isolation, its address and its node's)."""

    namespace: str
    name: str
    node: str | None = None
    ip: str | None = None
    host_ip: str | None = None


@dataclass(frozen=True)
class ContainerLimits:
    """The mongod container's resource limits as its pod states them (None: no limit), read
    when a StressChaos is injected: the stress runs in the container's cgroup, under them."""

    cpu: float | None = None
    """CPU cores."""
    memory_bytes: int | None = None


def pod_from_dns(host: str, default_namespace: str) -> PodRef | None:
    """`mongo-0.mongo.ns.svc.cluster.local:27017` → pod mongo-0 in ns (a StatefulSet pod's
    DNS name); `mongo-0.mongo:27017` → mongo-0 in the default namespace; an IP → None."""
    name = host.rsplit(":", 1)[0]
    if re.fullmatch(r"[\d.]+|\[?[0-9a-fA-F:]+\]?", name):
        return None
    labels = name.split(".")
    namespace = labels[2] if len(labels) >= 3 else default_namespace
    return PodRef(namespace, labels[0])


_SHORT_KIND = {
    "host-kill": "kill",
    "host-freeze": "freeze",
    "disk-fault": "disk",
    "volume-detach": "detach",
    "iops-throttle": "iops",
    "network-partition": "partition",
    "network-degrade": "degrade",
    "clock-skew": "clock",
    "cpu-starve": "cpu",
    "memory-pressure": "memory",
    "disk-fill": "fill",
    "zone-outage": "zone",
}


def resource_name(kind: str, pod: str, suffix: str | None = None) -> str:
    """A fresh name: `rsdrill-<kind>-<pod>-<6 hex>`, short enough for the Jobs and labels
    engines derive from it (63 characters)."""
    suffix = suffix or secrets.token_hex(3)
    stem = f"rsdrill-{_SHORT_KIND[kind]}-{pod}"[: 63 - 20 - len(suffix)].rstrip("-")
    return f"{stem}-{suffix}"


def _go_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{max(round(seconds * 1000), 1)}ms"
    return f"{math.ceil(seconds)}s"


def _go_exact(seconds: float) -> str:
    """A signed Go duration, exact to the microsecond: 60 → 60s, -1.5 → -1500ms, 0.0015 →
    1500us (a clock offset, a netem delay: rounding them would change the fault)."""
    micros = round(seconds * 1_000_000)
    if micros % 1_000_000 == 0:
        return f"{micros // 1_000_000}s"
    return f"{micros // 1000}ms" if micros % 1000 == 0 else f"{micros}us"


def _meta(name: str, namespace: str, fault: Fault) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {**MANAGED_BY, "rsdrill.io/fault": fault.kind},
    }


def _pods(refs: list[PodRef]) -> dict[str, list[str]]:
    pods: dict[str, list[str]] = {}
    for ref in refs:
        pods.setdefault(ref.namespace, []).append(ref.name)
    return pods


def iops_latency_s(fault: IopsThrottleFault) -> float:
    """The per-operation delay an iops-throttle stands for: its latency, or 1/IOPS (an
    operation may start only once the previous one's share of a second has passed)."""
    if fault.latency is not None:
        return fault.latency
    limit = fault.iops or fault.read_iops or fault.write_iops
    assert limit is not None  # the schema requires a limit
    return 1.0 / limit


def outside_of(kept: Iterable[str]) -> list[str]:
    """CIDRs covering every address of the families of `kept` but `kept` themselves: what a
    zone's isolation drops (everything outside the zone's member pods and their nodes)."""
    addresses = {ipaddress.ip_address(a) for a in kept}
    cidrs: list[str] = []
    for everything in ("0.0.0.0/0", "::/0"):
        nets: list[Any] = [ipaddress.ip_network(everything)]
        family = sorted(a for a in addresses if a.version == nets[0].version)
        if not family:
            continue
        for address in family:
            single = ipaddress.ip_network(address)
            nets = [part for net in nets
                    for part in (net.address_exclude(single) if single.subnet_of(net)
                                 else [net])]  # fmt: skip
        cidrs += [str(net) for net in sorted(nets)]
    return cidrs


def chaos_mesh_resource(
    fault: Fault,
    pod: PodRef,
    others: list[PodRef],
    platform: KubernetesPlatform,
    name: str,
    *,
    block_chaos: bool = False,
    side: list[PodRef] | None = None,
    limits: ContainerLimits | None = None,
    external: list[str] | None = None,
) -> tuple[ResourceType, dict[str, Any]]:
    """The Chaos Mesh object for `fault` on `pod` (`others`: the other members' pods, for a
    partition, or the far side of a partition shape whose near `side` holds more pods;
    `limits`: the container's, which size a StressChaos, None in a plan; `external`: the
    addresses a zone's isolation drops, `outside_of` the zone's)."""
    spec: dict[str, Any] = {"mode": "all", "selector": {"pods": _pods(side or [pod])}}
    if fault.duration is not None and fault.kind != "host-kill":
        spec["duration"] = _go_duration(fault.duration + SAFETY_MARGIN_S)
    rtype = IO_CHAOS
    containers = [platform.container]
    if fault.kind == "host-kill":
        rtype = POD_CHAOS
        spec.update(action="pod-kill", gracePeriod=0)
    elif fault.kind == "host-freeze":
        rtype = POD_CHAOS
        spec["action"] = "pod-failure"
    elif fault.kind == "volume-detach":
        spec.update(
            action="fault",
            volumePath=platform.volume_path,
            containerNames=containers,
            path=f"{platform.volume_path}/**/*",
            errno=errno_module.EIO,
            percent=100,
        )
    elif fault.kind == "disk-fault":
        path = f"{platform.volume_path}/{fault.path or '**/*'}"
        spec.update(
            volumePath=platform.volume_path,
            path=path,
            containerNames=containers,
            percent=max(1, round(fault.probability * 100)),
        )
        if "any" not in fault.operations:
            spec["methods"] = sorted({_DISK_METHODS[op] for op in fault.operations})
        if fault.errno == "none":
            assert fault.latency is not None  # the schema refuses a fault that does nothing
            spec.update(action="latency", delay=_go_duration(fault.latency))
        else:
            spec.update(action="fault", errno=getattr(errno_module, fault.errno))
    elif fault.kind == "iops-throttle":
        delay = _go_duration(iops_latency_s(fault))
        if block_chaos:
            rtype = BLOCK_CHAOS
            spec.update(
                action="delay",
                volumeName=platform.volume_name,
                containerNames=containers,
                delay={"latency": delay},
            )
        else:
            methods = (
                ["read"]
                if fault.read_iops
                else ["write", "fsync"]
                if fault.write_iops
                else ["read", "write", "fsync"]
            )
            spec.update(
                action="latency",
                volumePath=platform.volume_path,
                delay=delay,
                path=f"{platform.volume_path}/**/*",
                methods=methods,
                containerNames=containers,
                percent=100,
            )
    elif fault.kind == "network-partition":
        rtype = NETWORK_CHAOS
        spec.update(action="partition", direction=_DIRECTION[fault.direction])
        if others:
            spec["target"] = {"mode": "all", "selector": {"pods": _pods(others)}}
        if fault.isolate_from == "all":
            spec["externalTargets"] = ["0.0.0.0/0"]
    elif fault.kind == "zone-outage":
        # Chaos Mesh drops external targets on what the pod sends only (direction to): a TCP
        # peer outside the zone gets no reply, so the cut holds both ways for MongoDB.
        rtype = NETWORK_CHAOS
        spec.update(action="partition", direction="to", externalTargets=external or [])
        if others:
            spec["target"] = {"mode": "all", "selector": {"pods": _pods(others)}}
    elif fault.kind == "network-degrade":
        rtype = NETWORK_CHAOS
        spec.update(network_degrade_spec(fault))
        if fault.between == "members" and others:
            spec["target"] = {"mode": "all", "selector": {"pods": _pods(others)}}
    elif fault.kind == "clock-skew":
        rtype = TIME_CHAOS
        # The wall clock only, as the kind means: timers on CLOCK_MONOTONIC keep their pace.
        spec.update(timeOffset=_go_exact(fault.clock_offset), clockIds=["CLOCK_REALTIME"],
                    containerNames=containers)  # fmt: skip
    elif fault.kind in ("cpu-starve", "memory-pressure"):
        rtype = STRESS_CHAOS
        spec.update(containerNames=containers, stressors=stressors(fault, limits))
    else:
        raise ValueError(f"{fault.kind} has no Chaos Mesh resource")
    body = {
        "apiVersion": rtype.api_version,
        "kind": rtype.kind,
        "metadata": _meta(name, pod.namespace, fault),
        "spec": spec,
    }
    return rtype, body


MIB = 1024 * 1024


def stressors(
    fault: CpuStarveFault | MemoryPressureFault, limits: ContainerLimits | None
) -> dict[str, Any]:
    """StressChaos's stressors for a cpu-starve or memory-pressure of a container with these
    `limits` (None: not read yet, as in a plan, where the memory size is a placeholder)."""
    if fault.kind == "cpu-starve":
        workers = cpu_workers(fault.cpu_share, limits.cpu if limits else None)
        return {"cpu": {"workers": workers, "load": 100}}
    keep = round(fault.memory_limit_mb * MIB)
    if limits is None:
        size = f"<the container's memory limit less {keep}B>"
    elif limits.memory_bytes is None:
        raise ValueError(
            "the container has no memory limit: stress would press the node's memory, not "
            "the member's (set resources.limits.memory)"
        )
    elif limits.memory_bytes <= keep:
        raise ValueError(
            f"memory_limit_mb {fault.memory_limit_mb:g} is not below the container's memory "
            f"limit ({limits.memory_bytes / MIB:g} MiB): nothing to take"
        )
    else:
        size = f"{limits.memory_bytes - keep}B"
    return {"memory": {"workers": 1, "size": size}}


def chaos_summary(body: dict[str, Any]) -> str:
    """What a Chaos Mesh object does, in a few words (its action, or a TimeChaos's offset or a
    StressChaos's stressors, which have none)."""
    spec = body["spec"]
    if "action" in spec:
        return str(spec["action"])
    if "timeOffset" in spec:
        return f"timeOffset {spec['timeOffset']}"
    return ", ".join(
        f"{name} " + " ".join(f"{k} {v}" for k, v in stressor.items())
        for name, stressor in spec["stressors"].items()
    )


# Chaos Mesh's example figures for the token bucket: queue up to 20 MiB, bursts of 10 kB.
_BANDWIDTH_LIMIT_BYTES = 20 * 1024 * 1024
_BANDWIDTH_BUFFER_BYTES = 10_000


def _percent(share: float) -> str:
    return f"{share * 100:g}"


def network_degrade_spec(fault: NetworkDegradeFault) -> dict[str, Any]:
    """NetworkChaos's action and its parameters for a network-degrade: a bandwidth limit, or
    netem's delay (+ jitter, reorder), loss, duplicate and corrupt together."""
    direction: dict[str, Any] = {"direction": _DIRECTION[fault.direction]}
    options = fault.section("kubernetes", KubernetesFault)
    if options is not None and "network_interface" in options.model_fields_set:
        direction["device"] = options.network_interface
    if fault.bandwidth_mbit_s is not None:
        rate = {"rate": f"{fault.bandwidth_mbit_s:g}mbps", "limit": _BANDWIDTH_LIMIT_BYTES,
                "buffer": _BANDWIDTH_BUFFER_BYTES}  # fmt: skip
        return {"action": "bandwidth", "bandwidth": rate, **direction}
    netem: dict[str, Any] = {}
    if fault.latency is not None:
        netem["delay"] = {"latency": _go_exact(fault.latency)}
        if fault.jitter:
            netem["delay"]["jitter"] = _go_exact(fault.jitter)
        if fault.reorder is not None:
            # gap 1: any packet may go ahead (netem never reorders with gap 0), as tc's default.
            netem["delay"]["reorder"] = {"reorder": _percent(fault.reorder), "gap": 1}
    if fault.loss is not None:
        netem["loss"] = {"loss": _percent(fault.loss)}
    if fault.duplicate is not None:
        netem["duplicate"] = {"duplicate": _percent(fault.duplicate)}
    if fault.corrupt is not None:
        netem["corrupt"] = {"corrupt": _percent(fault.corrupt)}
    return {"action": "netem", **netem, **direction}


def _litmus_netem_field(fault: Fault) -> str:
    """A network-degrade's one netem field on Litmus (the load-time check allows one)."""
    return next(name for name in LITMUS_NETEM if getattr(fault, name) is not None)


def litmus_experiment_name(fault: Fault) -> str:
    if fault.kind == "network-degrade":
        return LITMUS_NETEM[_litmus_netem_field(fault)][0]
    options = fault.section("kubernetes", KubernetesFault) or KubernetesFault()
    return options.litmus_experiment or LITMUS_DEFAULT[fault.kind][fault.scope]


def _millis(seconds: float | None) -> str:
    return str(round((seconds or 0) * 1000))


def litmus_network_env(fault: NetworkDegradeFault, destinations: list[str]) -> list[dict[str, str]]:
    """A network-degrade's env for its Litmus pod-network experiment: its one netem value,
    the interface, and the addresses it is limited to (`destinations`, the other members'
    hosts: IP addresses as DESTINATION_IPS, names as DESTINATION_HOSTS, which the experiment
    resolves; none: everything the pod sends)."""
    field = _litmus_netem_field(fault)
    variable = LITMUS_NETEM[field][1]
    if field == "latency":
        # Whole milliseconds (checked when loaded).
        env = [{"name": variable, "value": _millis(fault.latency)},
               {"name": "JITTER", "value": _millis(fault.jitter)}]  # fmt: skip
    else:
        env = [{"name": variable, "value": _percent(getattr(fault, field))}]
    options = fault.section("kubernetes", KubernetesFault) or KubernetesFault()
    env.append({"name": "NETWORK_INTERFACE", "value": options.network_interface})
    if fault.between == "members":
        addresses = [h.rsplit(":", 1)[0].strip("[]") for h in destinations]
        ips = [a for a in addresses if _is_ip(a)]
        hosts = [a for a in addresses if not _is_ip(a)]
        env += [{"name": name, "value": ",".join(values)}
                for name, values in (("DESTINATION_IPS", ips), ("DESTINATION_HOSTS", hosts))
                if values]  # fmt: skip
    return env


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def litmus_engine(
    fault: Fault,
    pod: PodRef,
    name: str,
    container: str,
    destinations: list[str] | None = None,
) -> dict[str, Any]:
    """A ChaosEngine running the fault's Litmus experiment once on `pod` (or its node; for a
    disk-fill or a network-degrade, on its `container`; `destinations`: the other members'
    hosts, for a network-degrade between members), with a probe that the pod is back at the
    end (Litmus 3 requires a probe per experiment)."""
    options = fault.section("kubernetes", KubernetesFault) or KubernetesFault()
    experiment = litmus_experiment_name(fault)
    duration = str(math.ceil(fault.duration or 0) or 1)
    env = [{"name": "TOTAL_CHAOS_DURATION", "value": duration}]
    if fault.scope == "node":
        env.append({"name": "TARGET_NODE", "value": pod.node or ""})
    elif fault.kind == "network-degrade":
        env += [
            {"name": "TARGET_PODS", "value": pod.name},
            {"name": "TARGET_CONTAINER", "value": container},
            *litmus_network_env(fault, destinations or []),
        ]
    elif fault.kind == "disk-fill":
        # Litmus reads FILL_PERCENTAGE as a whole number: of the container's
        # ephemeral-storage limit.
        env += [
            {"name": "TARGET_PODS", "value": pod.name},
            {"name": "TARGET_CONTAINER", "value": container},
            {"name": "FILL_PERCENTAGE", "value": str(max(1, round(fault.fill_percent)))},
        ]
    else:
        # One kill: the interval is the whole duration.
        env += [
            {"name": "TARGET_PODS", "value": pod.name},
            {"name": "CHAOS_INTERVAL", "value": duration},
            {"name": "FORCE", "value": "true"},
        ]
    probe = {
        "name": "rsdrill-pod-back",
        "type": "k8sProbe",
        "mode": "EOT",
        "k8sProbe/inputs": {
            "group": "",
            "version": "v1",
            "resource": "pods",
            "namespace": pod.namespace,
            "operation": "present",
            "fieldSelector": f"metadata.name={pod.name}",
        },
        "runProperties": {"probeTimeout": "10s", "interval": "2s", "attempt": 3},
    }
    return {
        "apiVersion": CHAOS_ENGINE.api_version,
        "kind": CHAOS_ENGINE.kind,
        "metadata": _meta(name, pod.namespace, fault),
        "spec": {
            "engineState": "active",
            "chaosServiceAccount": options.chaos_service_account,
            "jobCleanUpPolicy": "delete",
            "appinfo": {
                "appns": pod.namespace,
                "appkind": "statefulset",
                "applabel": f"statefulset.kubernetes.io/pod-name={pod.name}",
            },
            "experiments": [
                {"name": experiment, "spec": {"components": {"env": env}, "probe": [probe]}}
            ],
        },
    }


def litmus_result_name(engine_name: str, experiment: str) -> str:
    """Litmus names an engine's result `<engine>-<experiment>`."""
    return f"{engine_name}-{experiment}"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts, experiment files) as literal blocks, as a person writes."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """Kubernetes objects as a YAML stream, keys in the order they were built."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, width=100)


# -- the plan ------------------------------------------------------------------------------------


def plan_details(exp: Experiment) -> list[str]:
    """Each fault's resources as YAML documents (or, for native faults, the API calls): every
    resource the run would create (members named by role are resolved at injection time, so
    their pods are shown as placeholders)."""
    from rsdrill.experiment.schema import SelectMember, describe_selection

    platform = exp.target.section("kubernetes", KubernetesPlatform)
    assert platform is not None
    lines: list[str] = []
    for i, fault in enumerate(exp.faults):
        if fault.kind in COMMAND_KINDS:
            continue
        engine = engine_of(fault)
        who = describe_selection(fault.select)
        pod = _planned_pod(
            fault.select.member if isinstance(fault.select, SelectMember) else None, who, platform
        )
        lines.append(f"# fault {i + 1}: {fault.kind} on {who} (engine {engine})")
        if engine == "native":
            lines += _native_plan(fault, pod, platform.container)
            continue
        # The run's name, untruncated: a placeholder pod would be cut short.
        name = f"rsdrill-{_SHORT_KIND[fault.kind]}-{pod.name}-<random>"
        if engine == "litmus":
            hosts = ["<the other members' hosts>"]
            body = litmus_engine(fault, pod, name, platform.container, hosts)
        else:
            outside = "outside the zone" if fault.kind == "zone-outage" else "other"
            others = [PodRef(pod.namespace, f"<pods of the {outside} members>")]
            block = (
                fault.section("kubernetes", KubernetesFault) or KubernetesFault()
            ).block_chaos == "always"
            # A zone's addresses are read when it is injected.
            external = ["<every address but the zone's member pods and their nodes>"]
            _, body = chaos_mesh_resource(fault, pod, others, platform, name, block_chaos=block,
                                          external=external)  # fmt: skip
            if fault.kind == "iops-throttle" and not block:
                lines.append(
                    "# a BlockChaos delay instead where the cluster has that CRD "
                    "(block_chaos: auto)"
                )
            if fault.kind in ("cpu-starve", "memory-pressure"):
                lines.append(
                    f"# the stressors are sized from container {platform.container}'s "
                    "limits in its pod when the fault is injected"
                )
        lines += ["---", *to_yaml([body]).splitlines()]
    return lines


def _planned_pod(member: str | None, who: str, platform: KubernetesPlatform) -> PodRef:
    if member is not None and platform.pods and member in platform.pods:
        return PodRef(platform.namespace, platform.pods[member], "<its node>")
    if member is not None and platform.selector is None and platform.pods is None:
        ref = pod_from_dns(member, platform.namespace)
        if ref is not None:
            return PodRef(ref.namespace, ref.name, "<its node>")
    return PodRef(platform.namespace, f"<pod of {who}>", f"<node of {who}>")


def _native_plan(fault: Fault, pod: PodRef, container: str) -> list[str]:
    options = fault.section("kubernetes", KubernetesFault) or KubernetesFault()
    if fault.kind == "iops-throttle":
        return [
            f"# the node agent on the node of pod {pod.namespace}/{pod.name} caps container "
            f"{container}'s cgroup (io.max or blkio.throttle) on its data volume's device",
            "# revert: the limits from before restored (journaled: `rsdrill recover` does it)",
        ]
    if fault.kind == "host-freeze":
        return [
            f"# exec in pod {pod.namespace}/{pod.name} container {container} (pods/exec): "
            "kill -STOP the mongod process (the same PID and sockets after)",
            "# revert: kill -CONT it (journaled: `rsdrill recover` resumes it)",
        ]
    if fault.kind == "zone-outage":
        return [
            f"# cordon node {pod.node}; evict every pod on it through the eviction API (grace "
            f"period {math.ceil(options.grace_period)}s; PodDisruptionBudgets respected)",
            f"# revert: uncordon node {pod.node}",
        ]
    if fault.scope == "node":
        steps = [
            f"# cordon node {pod.node}; evict every pod on it through the eviction API "
            "(PodDisruptionBudgets respected)"
        ]
        if options.delete_node:
            steps.append(
                f"# then delete the Node object {pod.node}; revert: uncordon it if it "
                "is still there"
            )
        else:
            steps.append(f"# revert: uncordon node {pod.node}")
        return steps
    return [
        f"# delete pod {pod.namespace}/{pod.name} (grace period "
        f"{math.ceil(options.grace_period)}s); its StatefulSet re-creates it"
    ]
