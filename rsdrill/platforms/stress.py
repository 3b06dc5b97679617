"""A noisy neighbour's CPU load, for the platforms that starve a member with stress-ng beside
it (Kubernetes StressChaos, EC2's AWSFIS-Run-CPU-Stress) rather than with a cgroup quota."""

from __future__ import annotations

import math

MAX_STRESS_WORKERS = 8192
"""stress-ng's own bound on one stressor's workers (the StressChaos CRD refuses more)."""


def cpu_workers(cpu_share: float, cpus: float | None) -> int:
    """Workers at full load that leave a busy mongod thread about `cpu_share` of a CPU when the
    scheduler shares each CPU fairly: ceil(1/cpu_share) - 1 per CPU (`cpus` rounded up; one
    when unknown), at least one and at most stress-ng's bound."""
    per_cpu = math.ceil(round(1 / cpu_share, 9)) - 1
    return min(MAX_STRESS_WORKERS, max(1, math.ceil(cpus or 1) * per_cpu))
