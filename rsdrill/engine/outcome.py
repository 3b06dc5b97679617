"""What a run's result records beyond its metrics: each fault as applied, the options it was
given, a random schedule's draw, and an unexpected error in words."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsdrill.experiment.schema import Experiment, Fault
from rsdrill.history import FaultRecord
from rsdrill.redact import redact_uri
from rsdrill.registry import member_source
from rsdrill.result import FaultResult, ServerInfo, TargetInfo
from rsdrill.runs import cluster_name

if TYPE_CHECKING:
    from rsdrill.deployment import Deployment
    from rsdrill.platforms.base import RunTarget


def fault_options(fault: Fault) -> dict[str, Any]:
    """What a fault was given beyond when and where (as in its file)."""
    return fault.model_dump(mode="json", exclude={"at", "kind", "select"}, exclude_unset=True)


def random_schedule(exp: Experiment) -> dict[str, Any] | None:
    """The seed, spec and drawn faults of a random schedule, as the result records them."""
    spec = exp.random_faults
    if spec is None:
        return None
    return {
        "seed": spec.seed,
        "spec": spec.model_dump(mode="json", exclude={"seed"}),
        "faults": [f.model_dump(mode="json", exclude_defaults=True) for f in exp.faults],
    }


def target_info(
    exp: Experiment,
    target: RunTarget | None,
    standalone: bool,
    zones: dict[str, str],
    deployment: Deployment | None,
) -> TargetInfo:
    """What the result says of the target, as found: an rs1 target that is a standalone
    server says so."""
    topology = "standalone" if standalone else exp.target.topology
    members = target.members if target else []
    set_name = deployment.set_name if deployment else None
    built = member_source(exp.target.platform) == "built"
    return TargetInfo(
        platform=exp.target.platform,
        topology=topology,
        cluster=cluster_name(
            exp.target.cluster, exp.target.platform, topology, set_name, members, built=built
        ),
        uri=redact_uri(target.uri) if target else "",
        members=members,
        zones=zones,
        server=ServerInfo(**deployment.to_dict()) if deployment else None,
    )


def internal_error(exc: Exception) -> str:
    """What a result says of an exception nobody expected."""
    return f"internal error: {type(exc).__name__}: {exc}"


def fault_result(record: FaultRecord) -> FaultResult:
    """A fault as result.json carries it."""
    return FaultResult(
        kind=record.kind,
        target=record.target,
        injected_at_s=record.injected_at_s,
        reverted_at_s=record.reverted_at_s,
        applied_at_s=record.applied_at_s,
        verified_at_s=record.verified_at_s,
        due_at_s=record.due_at_s,
        revert_due_at_s=record.revert_due_at_s,
        approximation=record.approximation,
        detail=record.detail,
    )
