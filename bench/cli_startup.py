"""Start-up time of `rsdrill --help` against Chaos Toolkit's `chaos --help`, on this machine.

Both run on the interpreter running this script. Installs chaostoolkit 1.19.0 into
.cache/chaostoolkit (pip --target) unless it is there: the newest release for Python 3.11, which
rsdrill supports (1.20 and later require 3.12). Runs one untimed warm-up of each command, then
each command once per round, in fresh processes, for N rounds (the order rotating every round),
and prints the median, min and max wall time of each and the ratio chaos / rsdrill for
like-for-like invocations (`python -m`, and the console scripts). Both load their modules from
bytecode caches, as installed packages do: PYTHONDONTWRITEBYTECODE is dropped, so the warm-up
writes rsdrill's if an editable install has none yet (pip compiled chaostoolkit's).

Usage: python bench/cli_startup.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

CHAOSTOOLKIT_VERSION = "1.19.0"
TARGET = Path(__file__).resolve().parent.parent / ".cache" / "chaostoolkit"


@dataclass
class Command:
    label: str
    argv: list[str]
    env: dict[str, str]
    times_s: list[float] = field(default_factory=list)

    def run(self) -> float:
        """Wall time of one run, in a fresh process; fails unless it exits 0."""
        started = time.perf_counter()
        proc = subprocess.run(self.argv, env=self.env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{self.label}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return elapsed


def install_chaostoolkit() -> None:
    if not (TARGET / f"chaostoolkit-{CHAOSTOOLKIT_VERSION}.dist-info").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", "--target"]
        subprocess.run([*pip, str(TARGET), f"chaostoolkit=={CHAOSTOOLKIT_VERSION}"], check=True)


def commands() -> tuple[Command, list[tuple[str, Command, Command]]]:
    """The interpreter's bare start-up, and the (invocation, rsdrill, chaos) pairs to compare."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    chaos_env = {**env, "PYTHONPATH": str(TARGET)}
    python = sys.executable
    bare = Command("python -c pass (for reference)", [python, "-c", "pass"], env)
    pairs = [
        (
            "python -m",
            Command("rsdrill: python -m rsdrill.cli --help",
                    [python, "-m", "rsdrill.cli", "--help"], env),
            Command("chaos:   python -m chaostoolkit --help",
                    [python, "-m", "chaostoolkit", "--help"], chaos_env),
        )
    ]  # fmt: skip
    rsdrill_script = Path(sysconfig.get_path("scripts")) / "rsdrill"
    if rsdrill_script.exists():
        pairs.append(
            (
                "console scripts",
                Command("rsdrill: rsdrill --help (console script)",
                        [str(rsdrill_script), "--help"], env),
                Command("chaos:   chaos --help (.cache/chaostoolkit/bin)",
                        [str(TARGET / "bin" / "chaos"), "--help"], chaos_env),
            )
        )  # fmt: skip
    return bare, pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    install_chaostoolkit()
    bare, pairs = commands()
    every = [bare, *(c for _, rsdrill, chaos in pairs for c in (rsdrill, chaos))]
    for command in every:
        command.run()
    for i in range(args.rounds):
        shift = i % len(every)
        for command in every[shift:] + every[:shift]:
            command.times_s.append(command.run())
    print(f"{args.rounds} rounds, each command once per round in a fresh process (wall time)")
    for command in every:
        ms = sorted(t * 1000 for t in command.times_s)
        print(
            f"  {command.label:47s} median {statistics.median(ms):6.0f} ms  "
            f"min {ms[0]:6.0f} ms  max {ms[-1]:6.0f} ms"
        )
    for how, rsdrill, chaos in pairs:
        ratio = statistics.median(chaos.times_s) / statistics.median(rsdrill.times_s)
        print(f"ratio chaos / rsdrill ({how}, medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
