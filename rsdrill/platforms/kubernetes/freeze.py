"""host-freeze on Kubernetes, for real: SIGSTOP of the member's mongod inside its pod through
the pods/exec subresource, SIGCONT on revert. The process keeps its PID, its memory and its
sockets; the kubelet sees a running container, so nothing restarts (Chaos Mesh's pod-failure,
the other way, replaces the container's image: a restart, not a freeze).

The commands are POSIX shell run in the mongod container (`sh -c`), finding the process by its
name in /proc, so they need no tool beyond `sh` and `kill` in the image. The kernel ignores a
SIGSTOP sent to a PID namespace's init from inside it: a mongod that is PID 1 of its container
cannot be frozen this way, and the freeze says so (manifests/ give the pod
`shareProcessNamespace: true`, which makes the pause container PID 1).

The resume finds the process by name as well, so its journaled revert action needs nothing
learnt at injection time: `rsdrill recover` sends SIGCONT to every process of that name in the
container (harmless to one that runs).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.kubernetes.client import ClusterAccess, KubeError
from rsdrill.platforms.kubernetes.resources import PodRef

_LOOK_AGAIN_S = 0.2

PROCESS = "mongod"

# Every script takes the process name as $0 and sets `pids` to its processes' ids.
_FIND = """pids=""
for d in /proc/[0-9]*; do
  [ "$(cat "$d/comm" 2>/dev/null)" = "$0" ] && pids="$pids ${d#/proc/}"
done
"""
_FREEZE = (
    _FIND
    + """[ -n "$pids" ] || { echo "no $0 process in this container" >&2; exit 3; }
for p in $pids; do
  if [ "$p" = 1 ]; then
    echo "$0 is PID 1 of its container: the kernel ignores SIGSTOP sent to a PID namespace's \
init from inside it (give the pod shareProcessNamespace: true)" >&2
    exit 4
  fi
done
kill -STOP $pids
echo $pids
"""
)
_THAW = (
    _FIND
    + """[ -z "$pids" ] || kill -CONT $pids
echo $pids
"""
)
# `state` of each process: the field after the parenthesised name in /proc/<pid>/stat.
_STATES = """for p in "$@"; do
  s=$(cat "/proc/$p/stat" 2>/dev/null) || { echo "$p gone"; continue; }
  s=${s##*) }
  echo "$p ${s%% *}"
done
"""


class ExecChannel(Protocol):
    """Runs a command in a pod's container and answers its standard output (`Kube.exec`, or a
    stand-in in tests); a failure or a non-zero exit raises KubeError with its message."""

    def exec(self, namespace: str, pod: str, container: str, argv: list[str]) -> str: ...


def freeze_command(process: str = PROCESS) -> list[str]:
    return ["sh", "-c", _FREEZE, process]


def thaw_command(process: str = PROCESS) -> list[str]:
    return ["sh", "-c", _THAW, process]


def states_command(pids: list[int]) -> list[str]:
    return ["sh", "-c", _STATES, "states", *map(str, pids)]


def _pids(output: str) -> list[int]:
    return [int(p) for p in output.split()]


def freeze(channel: ExecChannel, pod: PodRef, container: str, process: str = PROCESS) -> list[int]:
    """SIGSTOP the container's `process`; the ids of the processes stopped."""
    return _pids(channel.exec(pod.namespace, pod.name, container, freeze_command(process)))


def stopped(
    channel: ExecChannel, pod: PodRef, container: str, pids: list[int], within_s: float = 0.0
) -> bool:
    """Whether every one of `pids` is in the stopped state (T), looking again for up to
    `within_s`: a SIGSTOP is acted on when the process next runs, on a busy node not by the
    first look (which read "S" and failed a freeze that then held)."""
    deadline = time.monotonic() + within_s
    while True:
        output = channel.exec(pod.namespace, pod.name, container, states_command(pids))
        states = dict(line.split(" ", 1) for line in output.splitlines() if line)
        if bool(pids) and all(states.get(str(p)) in ("T", "t") for p in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_LOOK_AGAIN_S)


def thaw(channel: ExecChannel, pod: PodRef, container: str, process: str = PROCESS) -> list[int]:
    """SIGCONT every `process` of the container; their ids (empty: none is left)."""
    return _pids(channel.exec(pod.namespace, pod.name, container, thaw_command(process)))


def thaw_action(
    access: ClusterAccess, pod: PodRef, container: str, process: str = PROCESS
) -> dict[str, Any]:
    """The journaled revert of a freeze (`kubernetes.exec-thaw`)."""
    return {
        "action": "kubernetes.exec-thaw",
        **access.as_action(),
        "namespace": pod.namespace,
        "pod": pod.name,
        "container": container,
        "process": process,
    }


def run_thaw_action(channel: ExecChannel, action: dict[str, Any]) -> str:
    """Carry out a journaled `kubernetes.exec-thaw`; says what it did. Idempotent."""
    pod = PodRef(action["namespace"], action["pod"])
    where = f"pod {pod.namespace}/{pod.name} container {action['container']}"
    process = action.get("process", PROCESS)
    try:
        pids = thaw(channel, pod, action["container"], process)
    except KubeError as exc:
        if exc.status == 404:
            return f"{where} is gone; nothing to resume"
        raise
    if not pids:
        return f"no {process} left in {where}; nothing to resume"
    return f"SIGCONT sent to {process} (pid {' '.join(map(str, pids))}) in {where}"


def freeze_error(pod: PodRef, exc: KubeError) -> InjectionError:
    return InjectionError(f"host-freeze of pod {pod.namespace}/{pod.name} through pods/exec: {exc}")
