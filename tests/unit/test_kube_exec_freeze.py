"""Kubernetes host-freeze's commands run for real in a stand-in container: a process tree in its
own PID and mount namespaces (unshare), entered the way a container runtime carries out
pods/exec (nsenter), holding a process named mongod. The freeze stops that very process (its
PID kept), the revert and the journaled revert action resume it, and a mongod that is its
container's PID 1 is refused with the reason (the kernel would ignore the SIGSTOP)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rsdrill.connection import ConnectOptions
from rsdrill.experiment.loader import load_experiment_text
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.kubernetes.client import ClusterAccess, KubeError
from rsdrill.platforms.kubernetes.engines import ExecFreeze, Placement
from rsdrill.platforms.kubernetes.freeze import run_thaw_action
from rsdrill.platforms.kubernetes.options import KubernetesPlatform
from rsdrill.platforms.kubernetes.resources import PodRef

POD = PodRef("db", "mongo-0")
EXPERIMENT = """\
name: k8s-freeze
target:
  platform: kubernetes
  uri: mongodb://mongo-0.mongo.db.svc:27017/?replicaSet=rs0
  kubernetes: {namespace: db}
faults:
  - {at: 1s, kind: host-freeze, duration: 5s}
"""


class ContainerExec:
    """pods/exec as the container runtime does it: the command joins the container's PID and
    mount namespaces (so it sees the container's /proc) and runs there."""

    def __init__(self, init_pid: int) -> None:
        self.init_pid = init_pid
        self.calls: list[tuple[str, str, str, list[str]]] = []

    def exec(self, namespace: str, pod: str, container: str, argv: list[str]) -> str:
        self.calls.append((namespace, pod, container, argv))
        enter = ["nsenter", "-t", str(self.init_pid), "-p", "-m", *argv]
        done = subprocess.run(enter, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode != 0:
            raise KubeError(f"exit status {done.returncode}: {done.stderr.strip()}")
        return done.stdout


class Container:
    """A stand-in container whose `mongod` (a copy of sleep) runs under a shell as PID 1, or
    is PID 1 itself."""

    def __init__(self, directory: Path, *, mongod_is_init: bool) -> None:
        mongod = directory / "mongod"
        shutil.copy(shutil.which("sleep") or "/bin/sleep", mongod)
        inner = [str(mongod), "600"] if mongod_is_init else ["sh", "-c", f"{mongod} 600 & wait"]
        self.unshare = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *inner]
        )
        self.init_pid = _child(self.unshare.pid)
        self.mongod_pid = self.init_pid if mongod_is_init else _child(self.init_pid)
        self.channel = ContainerExec(self.init_pid)

    def state(self) -> str:
        """The mongod's state letter as the host sees it (T: stopped)."""
        stat = Path(f"/proc/{self.mongod_pid}/stat").read_text()
        return stat.rsplit(") ", 1)[1].split()[0]

    def reaches(self, states: str, within_s: float = 5.0) -> bool:
        """Whether the mongod's state becomes one of `states` in time: a signal is acted on
        when the process next runs, which on a loaded machine is not at once."""
        deadline = time.monotonic() + within_s
        while self.state() not in states:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self) -> None:
        self.unshare.kill()
        self.unshare.wait(timeout=10)


def _child(pid: int) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError(f"process {pid} started no child")


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.fail("util-linux's unshare and nsenter are needed")
    made = Container(tmp_path, mongod_is_init=False)
    yield made
    made.stop()


def _injector(channel: ContainerExec) -> ExecFreeze:
    exp = load_experiment_text(EXPERIMENT, "k8s.yaml", {})
    kube = SimpleNamespace(access=ClusterAccess(kubeconfig="/k/config"))
    # No server listens on port 1: MongoDB's side reads "not answering", as a frozen member.
    at = Placement(kube, KubernetesPlatform(namespace="db"), exp.faults[0], "127.0.0.1:1", POD,  # type: ignore[arg-type]
                   ConnectOptions())  # fmt: skip
    return ExecFreeze(at, channel)


def test_freeze_stops_the_containers_mongod_and_revert_resumes_it(container: Container) -> None:
    injector = _injector(container.channel)
    action = injector.revert_action()
    assert action == {
        "action": "kubernetes.exec-thaw",
        "kubeconfig": "/k/config",
        "context": None,
        "in_cluster": False,
        "namespace": "db",
        "pod": "mongo-0",
        "container": "mongod",
        "process": "mongod",
    }
    assert container.state() != "T"
    injector.inject()
    # PID 2 inside the container: the shell is its PID 1.
    assert injector.report() == {"frozen_pids": [2]}
    assert container.reaches("T")
    assert injector.verify(1.0)
    injector.revert()
    assert container.reaches("SR")
    assert not injector.verify(1.0), "resumed: no longer frozen"
    assert container.unshare.poll() is None, "the same process, alive: nothing restarted"
    assert {call[:3] for call in container.channel.calls} == {("db", "mongo-0", "mongod")}
    assert all(call[3][:2] == ["sh", "-c"] for call in container.channel.calls)


def test_the_journaled_revert_resumes_a_frozen_mongod(container: Container) -> None:
    """What `rsdrill recover` does after a killed run: SIGCONT from the journal alone."""
    injector = _injector(container.channel)
    action = injector.revert_action()
    injector.inject()
    assert container.reaches("T")
    said = run_thaw_action(container.channel, action)
    assert said == "SIGCONT sent to mongod (pid 2) in pod db/mongo-0 container mongod"
    assert container.reaches("SR")
    # Idempotent: a second recover resumes the running process again, harmlessly.
    run_thaw_action(container.channel, action)
    assert container.reaches("SR")


def test_a_mongod_that_is_pid_1_is_refused_with_the_reason(tmp_path: Path) -> None:
    made = Container(tmp_path, mongod_is_init=True)
    try:
        injector = _injector(made.channel)
        with pytest.raises(InjectionError) as refused:
            injector.inject()
        message = str(refused.value)
        assert message.startswith("host-freeze of pod db/mongo-0 through pods/exec: exit status 4")
        assert "mongod is PID 1 of its container" in message
        assert "shareProcessNamespace: true" in message
        assert made.state() != "T"
    finally:
        made.stop()


def test_a_container_without_mongod_is_refused(tmp_path: Path) -> None:
    shell = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                              "sleep", "600"])  # fmt: skip
    try:
        injector = _injector(ContainerExec(_child(shell.pid)))
        with pytest.raises(InjectionError, match="exit status 3: no mongod process in this"):
            injector.inject()
    finally:
        shell.kill()
        shell.wait(timeout=10)


class LateStop:
    """pods/exec on a busy node: the freeze's SIGSTOP is sent, and the process is seen stopped
    only from the second look on (it is acted on when the process next runs)."""

    def __init__(self) -> None:
        self.looks = 0

    def exec(self, namespace: str, pod: str, container: str, argv: list[str]) -> str:
        if argv[3] != "states":
            return "2\n"  # the freeze: the pid it stopped
        self.looks += 1
        return "2 T\n" if self.looks > 1 else "2 S\n"


def test_a_stop_acted_on_late_is_waited_for() -> None:
    late = LateStop()
    injector = _injector(late)  # type: ignore[arg-type]
    injector.inject()
    assert injector.verify(5.0)
    assert late.looks == 2
