"""`platform: kubernetes`: the target section, per-fault options and supported faults.

A fault on Kubernetes is carried out by an engine (`engine:` on the fault): Chaos Mesh or
LitmusChaos resources that rsdrill creates and deletes, or plain API calls (`native`).
Which kinds each engine can inject is the table `SUPPORT` below; `check_experiment` refuses
anything outside it, naming the field, before anything connects to the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeGuard

from pydantic import Field, model_validator

from rsdrill.faults import COMMAND_KINDS
from rsdrill.fields import Duration, FieldProblem, Strict

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment, Fault
    from rsdrill.faults import IopsThrottleFault, NetworkDegradeFault, NetworkPartitionFault

ENGINES = ("chaos-mesh", "litmus", "native")

# (kind, engine) → the scopes it supports. The first engine listed for a kind is its default.
SUPPORT: dict[str, dict[str, tuple[str, ...]]] = {
    "host-kill": {
        "native": ("member", "node"),
        "chaos-mesh": ("member",),
        "litmus": ("member", "node"),
    },
    # native: SIGSTOP through pods/exec; Chaos Mesh's pod-failure restarts the container.
    "host-freeze": {"native": ("member",), "chaos-mesh": ("member",)},
    "disk-fault": {"chaos-mesh": ("member",)},
    "volume-detach": {"chaos-mesh": ("member",)},
    # native: a true cap in the cgroup, by the opt-in node agent (so not the default); Chaos
    # Mesh adds a latency per operation only.
    "iops-throttle": {"chaos-mesh": ("member",), "native": ("member",)},
    "network-partition": {"chaos-mesh": ("member",)},
    # Litmus: one netem shape per fault, on what the pod sends.
    "network-degrade": {"chaos-mesh": ("member",), "litmus": ("member",)},
    "clock-skew": {"chaos-mesh": ("member",)},
    # StressChaos: a neighbour's load in the member's container, not a cgroup quota.
    "cpu-starve": {"chaos-mesh": ("member",)},
    "memory-pressure": {"chaos-mesh": ("member",)},
    # Litmus disk-fill fills the container's ephemeral storage (its writable layer).
    "disk-fill": {"litmus": ("member",)},
    # way isolate: a NetworkChaos partition; way kill: the zone's member nodes drained.
    "zone-outage": {"chaos-mesh": ("member",), "native": ("member",)},
}

# Chaos Mesh's IOChaos can add latency per operation; it has no bandwidth limit.
_THROUGHPUT_FIELDS = ("throughput_mb_s", "read_mb_s", "write_mb_s")
# cgroups cap reads and writes apart (IOPS and bytes); they have no combined limit.
_COMBINED_FIELDS = ("iops", "throughput_mb_s")
NODE_AGENT_PORT = 10260


class NodeAgentAccess(Strict):
    """Where the node agent (manifests/node-agent) listens on every node, and how its TLS
    certificate is checked. rsdrill calls it at the pod's host IP with a token of its
    ServiceAccount bound to the agent's audience (never its own token)."""

    port: int = Field(NODE_AGENT_PORT, ge=1, le=65535, description="the agent's port")
    ca_file: str | None = Field(
        None, description="CA of the agent's certificate (default: the system's CAs)"
    )


class KubernetesPlatform(Strict):
    """How to reach the cluster and which pod each replica-set member is.

    Members map to pods, in this order: `pods` (an explicit map), `selector` (pods with these
    labels, matched to members by pod IP or by `<pod>.<service>` host names), or the members'
    own StatefulSet DNS names (`mongo-0.mongo.ns.svc:27017` is pod mongo-0 in namespace ns).
    """

    kubeconfig: str | None = Field(
        None, description="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)"
    )
    in_cluster: bool = Field(
        False, description="use the pod's service account (rsdrill runs inside the cluster)"
    )
    context: str | None = Field(None, description="kubeconfig context (default: current)")
    namespace: str = Field(
        "default",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="namespace of the set's pods (and of the chaos resources rsdrill creates)",
    )
    pods: dict[str, str] | None = Field(
        None, description="member host:port → pod name, when names do not tell"
    )
    selector: str | None = Field(
        None, description="label selector of the set's pods, e.g. app=mongo"
    )
    container: str = Field("mongod", description="the mongod container's name in each pod")
    volume_path: str = Field(
        "/data/db", description="where the member's data volume is mounted in the container"
    )
    volume_name: str = Field(
        "data", description="the pod's volume holding the data (for BlockChaos)"
    )
    wait: Duration = Field(
        60.0, description="deadline for a chaos resource to report the fault injected or gone"
    )
    node_agent: NodeAgentAccess = Field(
        default_factory=NodeAgentAccess,
        description="iops-throttle with engine native: the node agent's port and CA",
    )

    @model_validator(mode="after")
    def _one_mapping(self) -> KubernetesPlatform:
        if self.pods is not None and self.selector is not None:
            raise FieldProblem(("selector",), "give `pods` or `selector`, not both")
        if self.in_cluster and self.kubeconfig is not None:
            raise FieldProblem(
                ("in_cluster",), "in_cluster uses the service account: drop `kubeconfig`"
            )
        for host in self.pods or {}:
            if ":" not in host:
                raise FieldProblem(("pods", host), "keys are members as host:port")
        return self


class KubernetesFault(Strict):
    """Options of one fault on Kubernetes."""

    grace_period: Duration = Field(
        0.0, description="native host-kill and node drain: the pods' termination grace period"
    )
    delete_node: bool = Field(
        True,
        description="host-kill scope node: delete the Node object after the drain "
        "(false: only drain, and uncordon on revert)",
    )
    litmus_experiment: str | None = Field(
        None,
        description="litmus: the ChaosExperiment to run (default: pod-delete, node-drain "
        "for scope node, disk-fill for a disk-fill; a network-degrade's follows its field)",
    )
    chaos_service_account: str = Field(
        "rsdrill-litmus",
        description="litmus: the service account its experiment pods run as (manifests/litmus)",
    )
    network_interface: str = Field(
        "eth0",
        min_length=1,
        description="network-degrade: the pod's interface netem shapes (Litmus's "
        "NETWORK_INTERFACE, Chaos Mesh's device)",
    )
    block_chaos: Literal["auto", "always", "never"] = Field(
        "auto",
        description="iops-throttle: BlockChaos delay where the cluster has it (auto), "
        "or IOChaos latency (never)",
    )


_ZONE_ENGINE = {"isolate": "chaos-mesh", "kill": "native"}


def engine_of(fault: Fault) -> str:
    """The fault's engine, or the default engine for its kind."""
    if fault.engine is not None:
        return fault.engine
    if fault.kind == "zone-outage":  # each way is one engine's
        return _ZONE_ENGINE[fault.way]
    return next(iter(SUPPORT.get(fault.kind, {"native": ()})))


def uses_node_agent(fault: Fault) -> TypeGuard[IopsThrottleFault]:
    """The fault is carried out by the node agent (manifests/node-agent). A TypeGuard: callers
    read the throttle's fields after asking."""
    return fault.kind == "iops-throttle" and engine_of(fault) == "native"


def check_experiment(exp: Experiment) -> None:
    """Refuse engines, kinds, scopes and options that Kubernetes cannot carry out."""
    for i, fault in enumerate(exp.faults):
        at = ("faults", i)
        if fault.kind in COMMAND_KINDS:
            if fault.engine is not None:
                raise FieldProblem(
                    (*at, "engine"), f"{fault.kind} is a command to the member: drop `engine`"
                )
            continue
        if fault.engine is not None and fault.engine not in ENGINES:
            raise FieldProblem(
                (*at, "engine"),
                f"unknown engine {fault.engine!r} on kubernetes (one of {', '.join(ENGINES)})",
            )
        if fault.kind not in SUPPORT:
            raise FieldProblem((*at, "kind"), f"{fault.kind} is not available on kubernetes")
        if fault.kind == "network-partition":
            _check_partition_shape(fault, at)
        engines = SUPPORT[fault.kind]
        engine = engine_of(fault)
        if engine not in engines:
            raise FieldProblem(
                (*at, "engine"),
                f"{fault.kind} with engine {engine}: not available (use {' or '.join(engines)})",
            )
        if fault.scope not in engines[engine]:
            raise FieldProblem(
                (*at, "scope"),
                f"{fault.kind} with engine {engine} supports scope {' and '.join(engines[engine])}",
            )
        _check_kind(fault, at)
        _check_options(fault, engine, at)


def _check_kind(fault: Fault, at: tuple[str | int, ...]) -> None:
    if fault.kind == "zone-outage" and engine_of(fault) != _ZONE_ENGINE[fault.way]:
        raise FieldProblem(
            (*at, "engine"),
            f"zone-outage way {fault.way} on kubernetes is engine {_ZONE_ENGINE[fault.way]} "
            "(kill: the zone's member nodes drained; isolate: a Chaos Mesh NetworkChaos)",
        )
    if fault.kind == "host-kill" and fault.restart is False:
        raise FieldProblem(
            (*at, "restart"),
            "on kubernetes the StatefulSet always brings the pod back; scale it down to keep a "
            "member away",
        )
    if fault.kind == "host-kill" and fault.restart:
        if fault.restart.model == "ha":
            raise FieldProblem(
                (*at, "restart", "model"),
                "model ha is vSphere HA's restart (sandbox, local, vsphere); on kubernetes "
                "the StatefulSet restarts the pod",
            )
        if fault.restart.volume == "wipe":
            raise FieldProblem(
                (*at, "restart", "volume"),
                "volume wipe on kubernetes: the "
                "StatefulSet brings the pod back on its own volume; use the "
                "emptyDir variant of the manifests for a full initial sync",
            )
        if fault.restart.after is not None:
            raise FieldProblem(
                (*at, "restart", "after"),
                "on kubernetes the StatefulSet "
                "restarts the pod at once; set `duration` (how long the chaos "
                "resource is kept) instead",
            )
    if fault.kind == "host-kill" and fault.power_loss:
        raise FieldProblem(
            (*at, "power_loss"), "power_loss needs the sandbox or local platform's storage layer"
        )
    if fault.kind == "disk-fault" and fault.replica is not None:
        raise FieldProblem(
            (*at, "replica"),
            "replica is one copy of a sandbox member's mirrored data; a volume's copies on "
            "kubernetes are its storage's, not rsdrill's to fail one by one",
        )
    if fault.kind == "disk-fault" and fault.errno != "none" and fault.latency is not None:
        raise FieldProblem(
            (*at, "latency"),
            "Chaos Mesh IOChaos applies one action: an errno or a latency; split it into two "
            "faults",
        )
    if uses_node_agent(fault):
        combined = [f for f in _COMBINED_FIELDS if f in fault.model_fields_set]
        if combined:
            raise FieldProblem(
                (*at, combined[0]),
                "a cgroup caps reads and writes apart: use read_iops/write_iops "
                "(read_mb_s/write_mb_s)",
            )
        if fault.latency is not None:
            raise FieldProblem(
                (*at, "latency"),
                "a latency per operation is Chaos Mesh's approximation of a cap: "
                "engine: chaos-mesh",
            )
    elif fault.kind == "iops-throttle":
        given = [f for f in _THROUGHPUT_FIELDS if f in fault.model_fields_set]
        if given:
            raise FieldProblem(
                (*at, given[0]),
                "Chaos Mesh has no IO bandwidth limit: use iops, read_iops, write_iops or latency",
            )
        if sum(f in fault.model_fields_set for f in ("iops", "read_iops", "write_iops")) > 1:
            raise FieldProblem(
                (*at, "iops"), "one IO limit on kubernetes: iops, read_iops or write_iops"
            )
    if fault.kind == "network-degrade":
        _check_degrade(fault, at)
    if fault.kind == "clock-skew" and fault.clock_drift:
        raise FieldProblem(
            (*at, "clock_drift"),
            "Chaos Mesh TimeChaos moves the clock by a fixed offset: drop `clock_drift` (the "
            "sandbox drifts)",
        )
    if fault.kind == "network-partition" and fault.isolate_from == "clients":
        raise FieldProblem(
            (*at, "isolate_from"),
            "NetworkChaos partitions pods from pods or addresses: use members or all",
        )


def _check_options(fault: Fault, engine: str, at: tuple[str | int, ...]) -> None:
    options = fault.section("kubernetes", KubernetesFault)
    if options is None:
        return
    given = options.model_fields_set
    rules = {
        # A network-degrade's experiment follows from its netem field.
        "litmus_experiment": engine == "litmus" and fault.kind != "network-degrade",
        "chaos_service_account": engine == "litmus",
        "grace_period": fault.kind == "host-kill" and engine == "native",
        "delete_node": fault.kind == "host-kill" and fault.scope == "node",
        "block_chaos": fault.kind == "iops-throttle" and engine == "chaos-mesh",
        "network_interface": fault.kind == "network-degrade",
    }
    for name, applies in rules.items():
        if name in given and not applies:
            raise FieldProblem(
                (*at, "kubernetes", name),
                f"`{name}` does not apply to "
                f"{fault.kind} with engine {engine}, scope {fault.scope}",
            )


# A network-degrade's netem fields, each the one field of a Litmus experiment (and its env).
LITMUS_NETEM: dict[str, tuple[str, str]] = {
    "latency": ("pod-network-latency", "NETWORK_LATENCY"),
    "loss": ("pod-network-loss", "NETWORK_PACKET_LOSS_PERCENTAGE"),
    "duplicate": ("pod-network-duplication", "NETWORK_PACKET_DUPLICATION_PERCENTAGE"),
    "corrupt": ("pod-network-corruption", "NETWORK_PACKET_CORRUPTION_PERCENTAGE"),
}


def _check_degrade(fault: NetworkDegradeFault, at: tuple[str | int, ...]) -> None:
    """Both engines shape a pod's egress with tc: Chaos Mesh the member's pod's (toward its
    target pods, or everything) and, for `from`, the target pods' toward it; Litmus the
    member's pod's only. Neither can tell clients apart: a tc filter matches the addresses
    it is given and cannot leave the members out."""
    if fault.between == "clients":
        raise FieldProblem(
            (*at, "between"),
            "on kubernetes a network-degrade shapes traffic to the other members' pods or to "
            "everything: clients' addresses are not known and a filter cannot leave the "
            "members out (use members or all)",
        )
    if engine_of(fault) == "litmus":
        _check_litmus_degrade(fault, at)
        return
    if fault.between == "all" and fault.direction != "outbound":
        raise FieldProblem(
            (*at, "direction"),
            "NetworkChaos without target pods shapes what the pod sends: write direction: "
            "outbound (or between: members for inbound or both)",
        )
    netem = [n for n in ("latency", "loss", "duplicate", "corrupt", "reorder")
             if n in fault.model_fields_set]  # fmt: skip
    if fault.bandwidth_mbit_s is not None and netem:
        raise FieldProblem(
            (*at, "bandwidth_mbit_s"),
            f"NetworkChaos applies a bandwidth limit or netem ({', '.join(netem)}), not both: "
            "split it into two faults",
        )


def _check_litmus_degrade(fault: NetworkDegradeFault, at: tuple[str | int, ...]) -> None:
    given = fault.model_fields_set
    for name in ("reorder", "bandwidth_mbit_s"):
        if name in given:
            raise FieldProblem(
                (*at, name),
                f"{name} with engine litmus: Litmus's pod-network experiments give latency, "
                "loss, duplication or corruption only (use engine chaos-mesh)",
            )
    shapes = [name for name in LITMUS_NETEM if getattr(fault, name) is not None]
    if len(shapes) > 1:
        raise FieldProblem(
            (*at, shapes[1]),
            f"one Litmus experiment per fault ({', '.join(shapes)} given): each replaces the "
            "pod interface's root qdisc, so two at once undo each other; split it into faults "
            "at different times, or use engine chaos-mesh",
        )
    if fault.direction != "outbound":
        raise FieldProblem(
            (*at, "direction"),
            "Litmus's pod-network experiments shape what the pod sends: write direction: "
            "outbound (or engine chaos-mesh for inbound or both)",
        )
    for name in ("latency", "jitter"):
        value = getattr(fault, name)
        if value is not None and abs(value * 1000 - round(value * 1000)) > 1e-6:
            raise FieldProblem(
                (*at, name),
                f"Litmus takes {'NETWORK_LATENCY' if name == 'latency' else 'JITTER'} in whole "
                "milliseconds",
            )


def _check_partition_shape(fault: NetworkPartitionFault, at: tuple[str | int, ...]) -> None:
    """One NetworkChaos partition cuts its selected pods from its target pods: shapes one,
    halves and bridge; a ring needs one per member and flapping a schedule of them."""
    if fault.shape == "ring":
        raise FieldProblem(
            (*at, "shape"),
            "shape ring on kubernetes: not available (one NetworkChaos cuts two sides); use "
            "one, halves or bridge, or the sandbox or local platform",
        )
    if fault.flapping is not None:
        raise FieldProblem(
            (*at, "flapping"), "flapping on kubernetes: not available; use the sandbox or local"
        )
    if fault.shape != "one":
        for name in ("isolate_from", "direction"):
            if name in fault.model_fields_set:
                raise FieldProblem(
                    (*at, name),
                    f"shape {fault.shape} cuts member links both ways: drop `{name}` (it "
                    "applies to shape one)",
                )
