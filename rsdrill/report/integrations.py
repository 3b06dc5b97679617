"""The plugins a run gets from its experiment and its environment: notifications and Grafana
annotations (`notify:`, `grafana:`), and OpenTelemetry traces (`OTEL_*`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from rsdrill.report.notify import GrafanaAnnotations, Notifier
from rsdrill.report.tracing import RunTracer, wanted

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment
    from rsdrill.history import RunClock


def integrations(experiment: Experiment, clock: Callable[[], RunClock | None]) -> list[object]:
    """The plugins the experiment's sections and the environment ask for."""
    plugins: list[object] = []
    if experiment.notify:
        plugins.append(Notifier(experiment.notify))
    if experiment.grafana is not None:
        plugins.append(GrafanaAnnotations(experiment.grafana, clock))
    if wanted(os.environ) and (tracer := RunTracer.from_environment(clock)) is not None:
        plugins.append(tracer)
    return plugins
