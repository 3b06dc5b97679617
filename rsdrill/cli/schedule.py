"""`rsdrill schedule render`: the Kubernetes objects that run experiments nightly."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rsdrill.cli.errors import exit_invalid, write_out

if TYPE_CHECKING:
    from rsdrill.cronjob import ScheduledFile

app = typer.Typer(
    help="Run experiments on a schedule (a Kubernetes CronJob).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

# A stand-in for ${VAR}s without a default while validating: the real values live in a Secret
# the CronJob reads at run time, never in what is rendered.
_PLACEHOLDER = "rsdrill-schedule-placeholder"


@app.command()
def render(
    files: Annotated[list[Path], typer.Argument(help="Experiment files (YAML).", metavar="FILE")],
    cron: Annotated[str, typer.Option("--cron", help='When, e.g. "0 2 * * *" (02:00 daily).')],
    namespace: Annotated[
        str, typer.Option(help="Namespace of the CronJob, its ServiceAccount and PVC.")
    ] = "rsdrill",
    name: Annotated[str, typer.Option(help="Name of the CronJob and its objects.")] = (
        "rsdrill-nightly"
    ),
    image: Annotated[
        str | None, typer.Option(help="The rsdrill image (manifests/Dockerfile).")
    ] = None,
    storage: Annotated[str, typer.Option(help="Size of the results/history volume.")] = "2Gi",
    storage_class: Annotated[
        str | None, typer.Option(help="StorageClass of the volume (default: the cluster's).")
    ] = None,
    time_zone: Annotated[
        str | None, typer.Option(help="Time zone of --cron, e.g. Europe/Berlin (default UTC).")
    ] = None,
    env_secret: Annotated[
        str, typer.Option(help="Secret holding the files' ${VAR} values (keys = names).")
    ] = "rsdrill-env",
    fail_on_regression: Annotated[
        bool, typer.Option(help="Fail the job when a metric regressed (rsdrill history).")
    ] = True,
    metrics_push: Annotated[
        str | None,
        typer.Option(
            "--metrics-push",
            envvar="RSDRILL_METRICS_PUSH",
            metavar="URL",
            help="A Prometheus Pushgateway every run pushes its metrics to (rsdrill run "
            "--metrics-push); '${VAR}' takes the URL from the Secret at run time, and a run "
            "pushes only when it is there.",
        ),
    ] = None,
    shared_history: Annotated[
        bool,
        typer.Option(
            "--shared-history",
            help="Record into the fleet's shared store and honour its stop lever and leases: "
            "the Secret holds RSDRILL_HISTORY (its mongodb:// URI) and RSDRILL_FLEET_KEY; each "
            "file names its cluster (target.cluster).",
        ),
    ] = False,
    fleet: Annotated[
        str | None,
        typer.Option(
            "--fleet",
            metavar="kubernetes://NAMESPACE",
            help="Keep the stop lever and the leases in this namespace (the job gets "
            "RSDRILL_FLEET, RSDRILL_FLEET_KEY from the Secret, and a Role there).",
        ),
    ] = None,
    lease_wait: Annotated[
        int,
        typer.Option(
            "--lease-wait",
            min=0,
            metavar="SECONDS",
            help="--shared-history: how long a run waits for another run's cluster.",
        ),
    ] = 1800,
    out: Annotated[
        Path | None, typer.Option("--out", dir_okay=False, help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Write a CronJob (concurrencyPolicy Forbid) that runs FILEs with `rsdrill run`, with a
    ConfigMap holding them, a ServiceAccount and the RBAC their faults need, and a PVC keeping
    results and history. Apply it with `kubectl apply -f`."""
    from rsdrill.cronjob import ScheduleError, ScheduleOptions, render_schedule
    from rsdrill.platforms.kubernetes.resources import to_yaml

    scheduled = [_load(path) for path in files]
    options = ScheduleOptions(cron=cron, namespace=namespace, name=name, storage=storage,
                              storage_class=storage_class, env_secret=env_secret,
                              time_zone=time_zone, fail_on_regression=fail_on_regression,
                              metrics_push=metrics_push or None,
                              shared_history=shared_history, lease_wait_s=lease_wait,
                              fleet=fleet,
                              image=image or ScheduleOptions.image)  # fmt: skip
    try:
        objects = render_schedule(scheduled, options)
    except ScheduleError as exc:
        exit_invalid(f"rsdrill schedule render: {exc}")
    text = to_yaml(objects)
    if out is None:
        typer.echo(text, nl=False)
    else:
        write_out(out, text)
        typer.echo(f"wrote {out} ({len(objects)} objects)")


def _load(path: Path) -> "ScheduledFile":
    from rsdrill.cronjob import ScheduledFile
    from rsdrill.experiment.loader import ExperimentError, load_experiment_text
    from rsdrill.experiment.yamltree import ENV_REF

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        exit_invalid(f"{path}: {exc}")
    references = [m for m in ENV_REF.finditer(text) if m.group("name")]
    env = {m.group("name"): _PLACEHOLDER for m in references if m.group("default") is None}
    try:
        experiment = load_experiment_text(text, str(path), env)
    except ExperimentError as exc:
        exit_invalid(str(exc))
    names = tuple(dict.fromkeys(m.group("name") for m in references))
    return ScheduledFile(path.name, text, experiment, names)
