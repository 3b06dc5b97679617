"""What the kubernetes platform does for each kind it carries out, per engine (its column of the
fault tables; the preflight and `rsdrill schedule render`'s Role read the RBAC from here)."""

from __future__ import annotations

from typing import Any

from rsdrill.faults.spec import Way, When
from rsdrill.platforms.kubernetes.options import KubernetesFault

TITLE = "Kubernetes"
"""The heading of its column in the fault tables."""


def _chaos_mesh(*plurals: str) -> tuple[str, ...]:
    # Events: where Chaos Mesh says it selected no pod (engines.chaos_mesh_state).
    return (*(f"create,get,delete {plural}.chaos-mesh.org" for plural in plurals), "list events")


_LITMUS = ("create,get,patch,delete chaosengines.litmuschaos.io",
           "get chaosexperiments.litmuschaos.io", "get chaosresults.litmuschaos.io")  # fmt: skip
# A node drain: the node cordoned (patch) and every pod on it, in any namespace, evicted.
_DRAIN = ("get,patch nodes cluster-wide", "list,get pods cluster-wide",
          "create pods/eviction cluster-wide")  # fmt: skip


def _on_node(fault: Any) -> bool:
    return bool(fault.scope == "node")


def _node_deleted(fault: Any) -> bool:
    options: KubernetesFault = fault.section("kubernetes", KubernetesFault) or KubernetesFault()
    return _on_node(fault) and options.delete_node


WAYS: dict[str, tuple[Way, ...]] = {
    "host-kill": (
        Way(
            "node drain, then the Node object deleted (scope node)",
            "one-way",
            "native",
            When("scope: node, delete_node", _node_deleted),
            (*_DRAIN, "delete nodes cluster-wide"),
        ),
        Way(
            "node drain, uncordoned on revert (scope node, delete_node: false)",
            engine="native",
            when=When("scope: node", _on_node),
            privileges=_DRAIN,
        ),
        Way("pod delete", engine="native", privileges=("delete pods",)),
        Way(
            "Chaos Mesh PodChaos pod-kill",
            engine="chaos-mesh",
            privileges=_chaos_mesh("podchaos"),
        ),
        Way(
            "Litmus node-drain (scope node)",
            engine="litmus",
            when=When("scope: node", _on_node),
            privileges=_LITMUS,
        ),
        Way("Litmus pod-delete", engine="litmus", privileges=_LITMUS),
    ),
    "host-freeze": (
        Way(
            "SIGSTOP of mongod in its pod through pods/exec, then SIGCONT",
            engine="native",
            privileges=("get,create pods/exec",),
        ),
        Way(
            "Chaos Mesh pod-failure: the container restarts instead of freezing",
            "approximate",
            "chaos-mesh",
            privileges=_chaos_mesh("podchaos"),
        ),
    ),
    "clock-skew": (
        Way(
            "Chaos Mesh TimeChaos: CLOCK_REALTIME of the mongod container's "
            "processes moved by `clock_offset` (no drift)",
            engine="chaos-mesh",
            privileges=_chaos_mesh("timechaos"),
        ),
    ),
    "cpu-starve": (
        Way(
            "Chaos Mesh StressChaos: stress-ng CPU workers at full load in the "
            "member's container, ceil(1/cpu_share) - 1 per CPU of its limit (or of one "
            "CPU): a neighbour's load the scheduler shares with mongod, not a quota",
            "approximate",
            "chaos-mesh",
            privileges=_chaos_mesh("stresschaos"),
        ),
    ),
    "memory-pressure": (
        Way(
            "Chaos Mesh StressChaos: stress-ng in the member's container allocates "
            "its memory limit less `memory_limit_mb` (a container without a limit "
            "is refused): a neighbour's allocation, which the OOM killer may take "
            "instead of mongod",
            "approximate",
            "chaos-mesh",
            privileges=_chaos_mesh("stresschaos"),
        ),
    ),
    "disk-fill": (
        Way(
            "Litmus disk-fill: the mongod container's ephemeral storage filled to "
            "`fill_percent` of its limit (FILL_PERCENTAGE), not the data volume; the "
            "kubelet evicts a pod past its limit",
            "approximate",
            "litmus",
            privileges=_LITMUS,
        ),
    ),
    "disk-fault": (
        Way(
            "Chaos Mesh IOChaos: an errno or a latency",
            engine="chaos-mesh",
            privileges=_chaos_mesh("iochaos"),
        ),
    ),
    "iops-throttle": (
        Way(
            "Chaos Mesh BlockChaos delay, or IOChaos latency: a latency per operation, not a cap",
            "approximate",
            "chaos-mesh",
            # The one the cluster has (BlockChaos where installed).
            privileges=_chaos_mesh("blockchaos", "iochaos"),
        ),
        Way(
            "cgroup io.max / blkio.throttle of the member's container, set and "
            "restored by the opt-in node agent (which admits the run's "
            "ServiceAccount by TokenReview)",
            engine="native",
            privileges=("get pods",),
        ),
    ),
    "volume-detach": (
        Way(
            "Chaos Mesh IOChaos: every operation fails",
            engine="chaos-mesh",
            privileges=_chaos_mesh("iochaos"),
        ),
    ),
    "network-partition": (
        Way(
            "Chaos Mesh NetworkChaos partition, iptables DROP in the pod's network "
            "namespace: established connections are cut too (shapes one, halves, "
            "bridge)",
            engine="chaos-mesh",
            privileges=_chaos_mesh("networkchaos"),
        ),
    ),
    "zone-outage": (
        Way(
            "way isolate: a Chaos Mesh NetworkChaos partition per member of the zone (its "
            "pod's node's topology.kubernetes.io/zone label): what it sends to any address "
            "but the zone's member pods and their nodes dropped (external targets), so TCP "
            "to and from outside the zone is cut and the zone's own links kept",
            engine="chaos-mesh",
            when=When("way: isolate", lambda fault: fault.way == "isolate"),
            privileges=(*_chaos_mesh("networkchaos"), "get nodes cluster-wide"),
        ),
        Way(
            "way kill: each member's node cordoned and its pods evicted at once "
            "(grace_period, 0 by default), kept cordoned for `duration` so the pods cannot "
            "come back in the zone, uncordoned on revert (a pod that the scheduler places "
            "in another zone comes back there)",
            engine="native",
            when=When("way: kill", lambda fault: fault.way == "kill"),
            privileges=(*_DRAIN, "get nodes cluster-wide"),
        ),
    ),
    "network-degrade": (
        Way(
            "Chaos Mesh NetworkChaos netem (delay, jitter, reorder, loss, duplicate, "
            "corrupt) or bandwidth on what the member's pod sends (outbound: "
            "direction to), on what the other members' pods send it (inbound: from) "
            "or both, between members (they are its target) or all (what it sends, "
            "outbound only); between clients refused (a filter cannot leave the "
            "members out)",
            engine="chaos-mesh",
            privileges=_chaos_mesh("networkchaos"),
        ),
        Way(
            "Litmus pod-network-latency (with JITTER), -loss, -duplication or "
            "-corruption: one of them per fault, since each replaces the pod "
            "interface's root qdisc and two would undo each other; what the pod "
            "sends only (direction outbound), to the other members "
            "(DESTINATION_IPS / DESTINATION_HOSTS) or to everything; no reorder or "
            "bandwidth",
            engine="litmus",
            privileges=_LITMUS,
        ),
    ),
}
"""Each kind → its ways, an engine's first way its default and the first way's engine the
default engine (`options.engine_of`); `injectors` has their factories."""
