"""Start-up time of `rsdrill --help` against Chaos Toolkit's `chaos --help`, on this machine.

Installs chaostoolkit 1.21.4 into .cache/chaostoolkit (pip --target) unless it is there, runs one
untimed warm-up of each command, then each command once per round, in fresh processes, for N
rounds (the order rotating every round), and prints the median, min and max wall time of each
and the ratio chaos / rsdrill for like-for-like invocations (`python -m`, and the console
scripts).

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

CHAOSTOOLKIT = "chaostoolkit==1.21.4"
TARGET = Path(__file__).resolve().parent.parent / ".cache" / "chaostoolkit"


@dataclass
class Command:
    label: str
    argv: list[str]
    env: dict[str, str] | None = None
    times_s: list[float] = field(default_factory=list)

    def run(self) -> float:
        """Wall time of one run, in a fresh process; fails unless it printed a usage."""
        started = time.perf_counter()
        proc = subprocess.run(self.argv, env=self.env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0 or "usage" not in proc.stdout.lower():
            raise RuntimeError(f"{self.label}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return elapsed


def install_chaostoolkit() -> None:
    if not (TARGET / "chaostoolkit").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(TARGET)]
        subprocess.run([*pip, CHAOSTOOLKIT], check=True)


def commands() -> tuple[list[Command], list[tuple[str, Command, Command]]]:
    """Every command to time, and the (invocation, rsdrill, chaos) pairs to compare."""
    chaos_env = {**os.environ, "PYTHONPATH": str(TARGET)}
    pairs = [
        (
            "python -m",
            Command(
                "rsdrill: python -m rsdrill.cli.app --help",
                [sys.executable, "-m", "rsdrill.cli.app", "--help"],
            ),
            Command(
                "chaos:   python -m chaostoolkit --help",
                [sys.executable, "-m", "chaostoolkit", "--help"],
                chaos_env,
            ),
        )
    ]
    rsdrill_script = Path(sysconfig.get_path("scripts")) / "rsdrill"
    if rsdrill_script.exists():
        pairs.append(
            (
                "console script",
                Command(f"rsdrill: {rsdrill_script} --help", [str(rsdrill_script), "--help"]),
                Command(
                    "chaos:   .cache/chaostoolkit/bin/chaos --help",
                    [str(TARGET / "bin" / "chaos"), "--help"],
                    chaos_env,
                ),
            )
        )
    return [c for _, r, ch in pairs for c in (r, ch)], pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    install_chaostoolkit()
    every, pairs = commands()
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
            f"  {command.label:50s} median {statistics.median(ms):6.0f} ms  "
            f"min {ms[0]:6.0f} ms  max {ms[-1]:6.0f} ms"
        )
    for how, rsdrill, chaos in pairs:
        ratio = statistics.median(chaos.times_s) / statistics.median(rsdrill.times_s)
        print(f"ratio chaos / rsdrill ({how}, medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
