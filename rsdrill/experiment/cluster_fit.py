"""Whether a sharded experiment's names fit the cluster it runs against. A cluster rsdrill builds
is checked when the file is loaded (its shape is in the file); one it finds from its routers
(Kubernetes, EC2, vSphere, local) is checked here, once found, before anything is injected."""

from __future__ import annotations

from rsdrill.experiment.schema import Experiment, SelectMember, SelectRouter, SelectShard
from rsdrill.layout import ShardedLayout


def misfit(exp: Experiment, layout: ShardedLayout) -> str | None:
    """The first fault selection or SLO naming what `layout` has not (None: all fit), as
    "<field>: <why>"."""
    from rsdrill.analysis.slo import SET_METRIC

    names = ", ".join(layout.shards)
    for i, fault in enumerate(exp.faults):
        sel, where = fault.select, f"faults[{i}].select"
        if isinstance(sel, SelectShard) and sel.shard != "any" and sel.shard not in layout.shards:
            return f"{where}.shard: no shard {sel.shard!r}: the cluster has {names} (or any)"
        if isinstance(sel, SelectRouter) and sel.mongos > len(layout.routers):
            return (f"{where}.mongos: {sel.mongos} routers, but target.uri names "
                    f"{len(layout.routers)}: {', '.join(layout.routers)}")  # fmt: skip
        if (isinstance(sel, SelectMember) and layout.set_of(sel.member) is None
                and sel.member not in layout.routers):  # fmt: skip
            return f"{where}.member: {sel.member} is no member or router of the cluster"
    for metric in exp.slo:
        found = SET_METRIC.match(metric)
        if found and found.group(1) is not None and found.group(1) not in layout.shards:
            return f"slo.{metric}: no shard {found.group(1)!r}: the cluster has {names}"
    return None
