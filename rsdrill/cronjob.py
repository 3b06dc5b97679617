"""Nightly chaos on Kubernetes: the objects that run experiment files on a schedule.

`render_schedule` turns experiment files into a ServiceAccount with exactly the permissions
their faults need (the preflight's own list, so a scheduled run is never refused for a missing
verb), a PersistentVolumeClaim for results and run history, a ConfigMap holding the files as
written, and a CronJob (concurrencyPolicy Forbid) running each file with `rsdrill run`, then
`rsdrill history --fail-on-regression`. `${VAR}` references in the files become environment
variables from a Secret the user creates, so no secret is ever written into these objects.
With a Pushgateway URL (`metrics_push`) every run pushes its metrics there (`rsdrill run
--metrics-push`); given as `${VAR}`, the URL too comes from the Secret at run time, and a run
pushes only when the Secret has it. With `shared_history` the runs record into the fleet's
shared store and honour its stop lever and leases: its URI and the fleet key come from the
Secret (keys RSDRILL_HISTORY and RSDRILL_FLEET_KEY), each file must name its cluster
(`target.cluster`), and the regression check looks at this job's clusters and runs only.
With `fleet` (`kubernetes://NAMESPACE`) the lever and the leases are in that namespace: the
job gets RSDRILL_FLEET, the fleet key from the Secret, and a Role there for what the store
does (rsdrill.fleet.kubernetes).
"""

from __future__ import annotations

import re
import shlex
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.kubernetes.options import KubernetesPlatform
from rsdrill.version import __version__

EXPERIMENTS_DIR = "/etc/rsdrill/experiments"
DATA_DIR = "/var/lib/rsdrill"
GRACE_S = 120
LABELS = {"app.kubernetes.io/name": "rsdrill", "app.kubernetes.io/managed-by": "rsdrill"}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-]+$")
_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SECRET_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ScheduleError(RsdrillError, ValueError):
    """A schedule that cannot be rendered (the message names the option or file)."""


@dataclass(frozen=True)
class ScheduledFile:
    """One experiment file: its name in the ConfigMap, its text as written, and its model."""

    name: str
    text: str
    experiment: Experiment
    env: tuple[str, ...] = ()  # the ${VAR} names it references


@dataclass(frozen=True)
class ScheduleOptions:
    cron: str
    namespace: str = "rsdrill"
    name: str = "rsdrill-nightly"
    image: str = f"rsdrill:{__version__}"
    storage: str = "2Gi"
    storage_class: str | None = None
    env_secret: str = "rsdrill-env"
    time_zone: str | None = None
    fail_on_regression: bool = True
    metrics_push: str | None = None  # a Pushgateway URL, or ${VAR}: the Secret's key VAR
    shared_history: bool = False  # RSDRILL_HISTORY and RSDRILL_FLEET_KEY from the Secret
    fleet: str | None = None  # kubernetes://NAMESPACE: the lever and leases there
    lease_wait_s: int = 1800  # shared_history: how long a run waits for its cluster
    extra_labels: Mapping[str, str] = field(default_factory=dict)


def check_cron(cron: str) -> None:
    """Refuse a schedule that is not five cron fields or a macro like @daily."""
    text = cron.strip()
    if text in _CRON_MACROS:
        return
    fields = text.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ScheduleError(
            f"--cron {cron!r}: want five fields (minute hour day-of-month month day-of-week), "
            'e.g. "0 2 * * *", or a macro like @daily'
        )


def check_push_url(url: str, env_secret: str) -> None:
    """Refuse a Pushgateway URL that is not http(s), or whose password would be written into
    the CronJob in the clear (`${VAR}` takes it from the Secret instead)."""
    if _SECRET_REF.fullmatch(url):
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScheduleError(
            f"--metrics-push {url!r}: want a Pushgateway URL such as http://pushgateway:9091, "
            "or ${VAR} to take it from the Secret"
        )
    if parts.username is not None or parts.password is not None:
        raise ScheduleError(
            "--metrics-push: the URL carries credentials, which would be written into the "
            f"CronJob in the clear; pass '${{RSDRILL_METRICS_PUSH}}' and put the URL in the "
            f"Secret {env_secret} under that key"
        )


def render_schedule(
    files: Sequence[ScheduledFile], options: ScheduleOptions
) -> list[dict[str, Any]]:
    """The Kubernetes objects of the schedule, in the order to apply them."""
    check_cron(options.cron)
    if not _NAME.match(options.name) or len(options.name) > 52:
        raise ScheduleError(f"--name {options.name!r}: a DNS label of at most 52 characters")
    if not files:
        raise ScheduleError("no experiment files")
    if options.metrics_push is not None:
        check_push_url(options.metrics_push, options.env_secret)
    fleet_namespace = _fleet_namespace(options.fleet)
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise ScheduleError(f"two files share a name: {', '.join(names)}")
    for f in files:
        platform = f.experiment.target.section("kubernetes", KubernetesPlatform)
        if f.experiment.target.platform != "kubernetes" or platform is None:
            raise ScheduleError(
                f"{f.name}: target.platform is {f.experiment.target.platform}; "
                "a schedule on Kubernetes runs kubernetes experiments"
            )
        if options.shared_history and f.experiment.target.cluster is None:
            raise ScheduleError(
                f"{f.name}: target.cluster: a schedule sharing its history names the cluster "
                "each file runs against, so its regressions are told from other clusters'"
            )
        if platform.kubeconfig is not None:
            raise ScheduleError(
                f"{f.name}: target.kubernetes.kubeconfig: a scheduled run uses "
                "the CronJob's service account; drop kubeconfig"
            )
    meta = _meta_factory(options)
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(options.name)},
        *rbac_objects(options.name, options.namespace, [f.experiment for f in files], meta),
        *_fleet_role(options, fleet_namespace, meta),
        _pvc(options, meta),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(f"{options.name}-experiments"),
            "data": {f.name: f.text for f in files},
        },
        _cronjob(files, options, meta),
    ]
    return objects


def _fleet_namespace(fleet: str | None) -> str | None:
    if fleet is None:
        return None
    namespace = fleet.removeprefix(FLEET_SCHEME).strip("/")
    if not fleet.startswith(FLEET_SCHEME) or not _NAME.match(namespace) or len(namespace) > 63:
        raise ScheduleError(f"--fleet {fleet!r}: want kubernetes://NAMESPACE (a schedule's fleet "
                            "is in the cluster it runs in)")  # fmt: skip
    return namespace


def _fleet_role(options: ScheduleOptions, namespace: str | None, meta: Any) -> list[dict[str, Any]]:
    """What the runs need of the fleet's namespace, bound to the schedule's ServiceAccount."""
    if namespace is None:
        return []
    name = f"{options.name}-fleet"
    subjects = [{"kind": "ServiceAccount", "name": options.name, "namespace": options.namespace}]
    return _bound_role("Role", name, meta(name, namespace), FLEET_RULES, subjects)


def _meta_factory(options: ScheduleOptions) -> Any:
    def meta(name: str, namespace: str | None = options.namespace) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name}
        if namespace is not None:
            out["namespace"] = namespace
        out["labels"] = {
            **LABELS,
            "app.kubernetes.io/instance": options.name,
            **options.extra_labels,
        }
        return out

    return meta


def role_rules(
    experiments: Sequence[Experiment], account: tuple[str, str] | None = None
) -> tuple[dict[str | None, list[dict[str, Any]]], list[dict[str, Any]]]:
    """RBAC rules for everything the experiments' faults do, run as the ServiceAccount
    `account` (namespace, name): {namespace: rules} for Roles and the rules of a ClusterRole
    (node-level faults), merged per API group, resource and object name."""
    from rsdrill.platforms.kubernetes.preflight import needed_permissions

    grouped: dict[str | None, dict[tuple[str, str, str], list[str]]] = defaultdict(dict)
    for exp in experiments:
        platform = exp.target.section("kubernetes", KubernetesPlatform)
        assert platform is not None
        # Both ways an iops-throttle may go (BlockChaos where installed, IOChaos otherwise).
        for block_chaos in (False, True):
            for p in needed_permissions(
                platform, exp.faults, block_chaos=block_chaos, account=account
            ):
                resource = f"{p.resource}/{p.subresource}" if p.subresource else p.resource
                verbs = grouped[p.namespace].setdefault((p.group, resource, p.name), [])
                if p.verb not in verbs:
                    verbs.append(p.verb)

    def rule(group: str, resource: str, name: str, verbs: list[str]) -> dict[str, Any]:
        names = {"resourceNames": [name]} if name else {}
        return {"apiGroups": [group], "resources": [resource], "verbs": verbs, **names}

    def rules(entries: dict[tuple[str, str, str], list[str]]) -> list[dict[str, Any]]:
        return [rule(*key, verbs) for key, verbs in sorted(entries.items())]

    cluster = rules(grouped.pop(None, {}))
    return {ns: rules(entries) for ns, entries in grouped.items()}, cluster


def rbac_objects(
    name: str, namespace: str, experiments: Sequence[Experiment], meta: Any
) -> list[dict[str, Any]]:
    """Roles (one per namespace the experiments act in) and, for node-level faults, a
    ClusterRole, bound to the ServiceAccount `name` in `namespace`."""
    namespaced, cluster = role_rules(experiments, (namespace, name))
    subjects = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    objects: list[dict[str, Any]] = []
    for where, rules in sorted(namespaced.items(), key=lambda item: str(item[0])):
        objects += _bound_role("Role", name, meta(name, where), rules, subjects)
    if cluster:
        cluster_name = f"{namespace}-{name}"
        objects += _bound_role(
            "ClusterRole", cluster_name, meta(cluster_name, None), cluster, subjects
        )
    return objects


def _bound_role(
    kind: str,
    name: str,
    metadata: dict[str, Any],
    rules: list[dict[str, Any]],
    subjects: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    api = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": f"{api}/v1", "kind": kind, "metadata": metadata, "rules": rules},
        {
            "apiVersion": f"{api}/v1",
            "kind": f"{kind}Binding",
            "metadata": metadata,
            "subjects": subjects,
            "roleRef": {"apiGroup": api, "kind": kind, "name": name},
        },
    ]


def _pvc(options: ScheduleOptions, meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": options.storage}},
    }
    if options.storage_class:
        spec["storageClassName"] = options.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(f"{options.name}-data"),
        "spec": spec,
    }


SHARED_ENV = ("RSDRILL_HISTORY", "RSDRILL_FLEET_KEY")
"""What a schedule with a shared history takes from the Secret (required, unlike the files')."""
FLEET_SCHEME = "kubernetes://"
# What rsdrill.fleet.kubernetes does in the fleet's namespace (a layer this one cannot import).
FLEET_RULES = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "verbs": ["get", "create", "update"]},
]  # fmt: skip


def _required_env(options: ScheduleOptions) -> tuple[str, ...]:
    if options.shared_history:
        return SHARED_ENV
    return ("RSDRILL_FLEET_KEY",) if options.fleet else ()


# The script is the container's PID 1, which the kernel spares every signal it has no handler
# for: without the trap, the SIGTERM of the job's deadline never reached the run, and the
# SIGKILL after the grace period left its faults in force. Passed on, the run reverts them,
# writes its result and exits 3; no later step starts.
_SIGNALS = [
    "child=",
    "stopped=0",
    """trap 'stopped=1; if [ -n "$child" ]; then kill -TERM "$child"; fi' TERM INT""",
    'step() { "$@" & child=$!; wait "$child"; code=$?',
    '  while kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done',
    '  child=; return "$code"; }',
]
_STEP = '[ "$stopped" = 1 ] || step'
# The journal on the claim, not in the pod: what a night killed outright (SIGKILL, a lost
# node) left in force is reverted by the next night's job before its runs. --force: the pids
# its journal names are another pod's, which say nothing here (Forbid: no other night runs).
_RECOVER = [
    f"export RSDRILL_HOME={DATA_DIR}/home",
    f"{_STEP} rsdrill recover --force || status=1",
]


def job_script(files: Sequence[ScheduledFile], options: ScheduleOptions) -> str:
    """The shell script the CronJob's container runs: every experiment (each in its own results
    directory, all recorded in one history), then the regression check. With a shared history
    (RSDRILL_HISTORY from the Secret) a run waits for its cluster's lease, and the check is of
    this job's clusters and of the runs since it started."""
    lines = ["set -u", "status=0", *_SIGNALS, *_RECOVER, "stamp=$(date -u +%Y%m%d-%H%M%S)"]
    if options.shared_history:
        lines.append("started=$(date -u +%Y-%m-%dT%H:%M:%S)")
        where = ""
    else:
        where = f' --history "{DATA_DIR}/history.db"'
    if options.shared_history or options.fleet:
        where += f" --lease-wait {options.lease_wait_s}"
    push = _push_arguments(options.metrics_push)
    for f in files:
        stem = f.name.rsplit(".", 1)[0]
        lines.append(
            f'{_STEP} rsdrill run "{EXPERIMENTS_DIR}/{f.name}" --no-live --yes '
            f'--out "{DATA_DIR}/results/$stamp/{stem}"{where}{push} || status=1'
        )
    if options.fail_on_regression and options.shared_history:
        for cluster in dict.fromkeys(str(f.experiment.target.cluster) for f in files):
            lines.append(f'{_STEP} rsdrill history --cluster {shlex.quote(cluster)} --since '
                         '"$started" --fail-on-regression || status=1')  # fmt: skip
    elif options.fail_on_regression:
        lines.append(f'{_STEP} rsdrill history --db "{DATA_DIR}/history.db" '
                     "--fail-on-regression || status=1")  # fmt: skip
    lines.append('[ "$stopped" = 0 ] || status=1')
    lines.append('exit "$status"')
    return "\n".join(lines) + "\n"


def _push_arguments(url: str | None) -> str:
    """` --metrics-push URL` for each run's line; from `${VAR}`, only when VAR is set."""
    if url is None:
        return ""
    reference = _SECRET_REF.fullmatch(url)
    if reference is None:
        return f" --metrics-push {shlex.quote(url)}"
    name = reference.group(1)
    return f' ${{{name}:+--metrics-push "${name}"}}'


def _secret_names(files: Sequence[ScheduledFile], options: ScheduleOptions) -> list[str]:
    """The environment variables the job takes from the Secret: the files' ${VAR}s and a
    Pushgateway URL given as ${VAR}."""
    names = {name for f in files for name in f.env}
    reference = _SECRET_REF.fullmatch(options.metrics_push or "")
    if reference is not None:
        names.add(reference.group(1))
    return sorted(names)


def _cronjob(files: Sequence[ScheduledFile], options: ScheduleOptions, meta: Any) -> dict[str, Any]:
    env_names = _secret_names(files, options)
    required = _required_env(options)
    env = [
        {
            "name": name,
            "valueFrom": {
                # A schedule meant to share its history does not run without the store.
                "secretKeyRef": {
                    "name": options.env_secret,
                    "key": name,
                    "optional": name not in required,
                }
            },
        }
        for name in [*required, *(n for n in env_names if n not in required)]
    ]
    # A run lasts its faults, observation and probes; a job that outlives all of them twice
    # over is stuck, and Forbid would then skip every later night.
    budget_s = sum(_run_budget_s(f.experiment) for f in files)
    if options.shared_history or options.fleet:  # each run may wait that long for its cluster
        budget_s += len(files) * options.lease_wait_s
    container: dict[str, Any] = {
        "name": "rsdrill",
        "image": options.image,
        "command": ["/bin/sh", "-c", job_script(files, options)],
        "volumeMounts": [
            {"name": "experiments", "mountPath": EXPERIMENTS_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if options.fleet:
        env.insert(0, {"name": "RSDRILL_FLEET", "value": options.fleet})
    if env:
        container["env"] = env
    spec: dict[str, Any] = {
        "schedule": options.cron.strip(),
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": 3600,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 5,
        "jobTemplate": {
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": 2 * budget_s,
                "template": {
                    "metadata": {"labels": {**LABELS, "app.kubernetes.io/instance": options.name}},
                    "spec": {
                        "serviceAccountName": options.name,
                        "restartPolicy": "Never",
                        # The run's revert and reports after the deadline's SIGTERM, then KILL.
                        "terminationGracePeriodSeconds": GRACE_S,
                        "securityContext": {"fsGroup": 10001},
                        "containers": [container],
                        "volumes": [
                            {
                                "name": "experiments",
                                "configMap": {"name": f"{options.name}-experiments"},
                            },
                            {
                                "name": "data",
                                "persistentVolumeClaim": {"claimName": f"{options.name}-data"},
                            },
                        ],
                    },
                },
            }
        },
    }
    if options.time_zone:
        spec["timeZone"] = options.time_zone
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(options.name),
        "spec": spec,
    }


def _run_budget_s(exp: Experiment) -> int:
    faults_end = max(f.at + (f.revert_after or 0.0) for f in exp.faults)
    return int(faults_end + exp.observe.after_revert + 300)
