"""The plan: what an experiment will do, to which member and when, without doing any of it."""

from __future__ import annotations

import socket
import subprocess

import pytest

from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.plan import (
    PlannedStep,
    plan_data,
    plan_experiment,
    redact_uri,
    render_plan,
)
from rsdrill.experiment.schema import Experiment, SelectCount, SelectMember, describe_selection
from rsdrill.platforms.sandbox.target import SandboxTarget
from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.mongod import MongodEngine

HEADER = """\
name: plan-test
description: kill the primary, bring it back
target:
  platform: sandbox
  topology: rs3
"""


def experiment(faults: str, extra: str = "", header: str = HEADER) -> Experiment:
    return load_experiment_text(f"{header}faults:\n{faults}{extra}", "plan.yaml", {})


def test_host_kill_with_a_duration() -> None:
    exp = experiment("  - {at: 5s, kind: host-kill, duration: 20s}\n")
    assert plan_experiment(exp) == [
        PlannedStep(
            0.0,
            "observe",
            "steady-state",
            "",
            "steady state: probes record a baseline (at least 2s before the first fault)",
            until_s=5.0,
        ),
        PlannedStep(
            5.0,
            "inject",
            "host-kill",
            "the primary at that moment",
            "the primary at that moment (SIGKILL)",
        ),
        PlannedStep(
            25.0,
            "revert",
            "host-kill",
            "the primary at that moment",
            "restart it on its kept data directory",
        ),
        PlannedStep(
            25.0,
            "observe",
            "recovery",
            "",
            "until every member is healthy (at least 2s, at most 30s)",
            until_s=55.0,
        ),
    ]


def test_restart_after_overrides_the_duration_and_wipe_says_initial_sync() -> None:
    exp = experiment(
        "  - {at: 5s, kind: host-kill, duration: 20s, restart: {after: 30s, volume: wipe}}\n"
    )
    revert = next(s for s in plan_experiment(exp) if s.action == "revert")
    assert revert.at_s == 35.0
    assert revert.description == "restart it on an empty data directory (full initial sync)"


def test_kill_without_restart_has_no_revert() -> None:
    exp = experiment("  - {at: 5s, kind: host-kill, restart: false}\n")
    steps = plan_experiment(exp)
    assert [s.action for s in steps] == ["observe", "inject", "observe"]
    assert steps[1].description == "the primary at that moment (SIGKILL; never restarted)"
    assert (steps[2].at_s, steps[2].until_s) == (5.0, 35.0)


def test_freeze_is_sigstop_then_sigcont() -> None:
    exp = experiment("  - {at: 3s, kind: host-freeze, select: secondary, duration: 4s}\n")
    inject, revert = (s for s in plan_experiment(exp) if s.action in ("inject", "revert"))
    assert inject.description == "a secondary at that moment (SIGSTOP for 4s)"
    assert (revert.at_s, revert.description) == (7.0, "resume it (SIGCONT)")


def test_network_degrade_and_partition_shapes_in_words() -> None:
    exp = experiment(
        "  - {at: 3s, kind: network-degrade, between: members, latency: 40ms, loss: 0.05,"
        " duration: 4s}\n"
        "  - {at: 9s, kind: network-partition, shape: halves, flapping: 1s, duration: 4s}\n"
    )
    steps = [s for s in plan_experiment(exp) if s.action in ("inject", "revert")]
    assert [s.description for s in steps] == [
        "the primary at that moment (degrade its links to the other members (both ways): "
        "+40ms, 5% loss for 4s)",
        "restore the links on it",
        "the primary at that moment (partition shape halves around it (member links, both "
        "ways), cut and healed every 1s for 4s)",
        "heal the partition on it",
    ]


def test_clock_cpu_memory_and_disk_fill_in_words() -> None:
    # These four crashed the plan (no revert words) before they had words of their own.
    exp = experiment(
        "  - {at: 3s, kind: clock-skew, clock_offset: -30, clock_drift: 0.1, duration: 4s}\n"
        "  - {at: 9s, kind: cpu-starve, cpu_share: 0.1, duration: 4s}\n"
        "  - {at: 15s, kind: memory-pressure, memory_limit_mb: 64, duration: 4s}\n"
        "  - {at: 21s, kind: disk-fill, fill_percent: 95, duration: 4s}\n"
    )
    steps = [s for s in plan_experiment(exp) if s.action in ("inject", "revert")]
    assert [s.description for s in steps] == [
        "the primary at that moment (set its clock 30s behind, drifting +0.1 s/s for 4s)",
        "set the clock right on it",
        "the primary at that moment (starve its CPU to 10% of one CPU for 4s)",
        "end the CPU starvation on it",
        "the primary at that moment (let it allocate only 64 MB more for 4s)",
        "lift the memory limit on it",
        "the primary at that moment (fill its data disk to 95% for 4s)",
        "free the disk on it",
    ]


def test_stepdown_is_not_reverted() -> None:
    exp = experiment("  - {at: 5s, kind: stepdown, duration: 30s, secondary_catch_up: 5s}\n")
    steps = plan_experiment(exp)
    assert [s.action for s in steps] == ["observe", "inject", "observe"]
    assert steps[1].description == (
        "the primary at that moment (replSetStepDown: not electable for 30s, "
        "secondaries get 5s to catch up)"
    )


def test_stepdown_default_period_and_force() -> None:
    exp = experiment("  - {at: 5s, kind: stepdown, force: true}\n")
    assert "not electable for 60s, secondaries get 10s to catch up, force" in (
        plan_experiment(exp)[1].description
    )


def test_overlapping_faults_are_in_time_order() -> None:
    exp = experiment(
        "  - {at: 10s, kind: host-kill, duration: 20s}\n"
        "  - {at: 15s, kind: host-freeze, select: secondary, duration: 5s}\n"
    )
    steps = plan_experiment(exp)
    assert [(s.at_s, s.action, s.kind) for s in steps] == [
        (0.0, "observe", "steady-state"),
        (10.0, "inject", "host-kill"),
        (15.0, "inject", "host-freeze"),
        (20.0, "revert", "host-freeze"),
        (30.0, "revert", "host-kill"),
        (30.0, "observe", "recovery"),
    ]


def test_fixed_observation_window() -> None:
    exp = experiment(
        "  - {at: 5s, kind: host-kill, duration: 20s}\n",
        "observe: {after_revert: 1m, until_recovered: false}\n",
    )
    last = plan_experiment(exp)[-1]
    assert (last.at_s, last.until_s, last.description) == (25.0, 85.0, "for 60s")


@pytest.mark.parametrize(
    ("selection", "text"),
    [
        ("primary", "the primary at that moment"),
        ("secondary", "a secondary at that moment"),
        ("arbiter", "the arbiter"),
        (SelectMember(member="127.0.0.1:28018"), "member 127.0.0.1:28018"),
        (SelectCount(count=1), "1 member at that moment (secondaries first)"),
        (SelectCount(count=2, role="secondary"), "2 secondaries at that moment"),
        (SelectCount(count=2, role="data"),
         "2 data-bearing members at that moment (secondaries first)"),
    ],
)  # fmt: skip
def test_selection_in_words(selection: object, text: str) -> None:
    assert describe_selection(selection) == text  # type: ignore[arg-type]


def test_several_members_are_them() -> None:
    exp = experiment(
        "  - {at: 5s, kind: host-kill, duration: 5s, select: {count: 2, role: secondary}}\n"
    )
    revert = next(s for s in plan_experiment(exp) if s.action == "revert")
    assert revert.description == "restart them on their kept data directory"


def test_render_shows_target_probes_timeline_and_slos() -> None:
    exp = experiment(
        "  - {at: 5s, kind: host-kill, duration: 20s}\n",
        "probes:\n  lag: null\n  load: {rate: 50}\n"
        'slo:\n  write_unavailable_s: "<= 15"\n  failover_s: "  <  12.7 "\n',
        header=HEADER + "  election_timeout: 5s\n  heartbeat_timeout: 5\n  port_base: 28017\n"
        "  data_mb: 64\n  cache_mb: 16\n",
    )
    text = render_plan(exp)
    assert text.startswith("experiment plan-test\n  kill the primary, bring it back\n")
    assert "sandbox rs3: three data-bearing members, engine auto, ports 28017-28019" in text
    assert ("election timeout 5s, heartbeat interval 2s (MongoDB's default), heartbeat timeout "
            "5s") in text  # fmt: skip
    assert "64 MB of data preloaded, page cache 16 MB per member" in text
    assert "availability  writes and reads every 20ms, timeout 250ms, w:majority" in text
    assert "lag           off" in text
    assert "load          workload a (50/50 read/update), 50 ops/s on 4 threads" in text
    lines = text.splitlines()
    assert "  t+5.0s          inject   host-kill  the primary at that moment (SIGKILL)" in lines
    assert "  t+25.0s         revert   host-kill  restart it on its kept data directory" in lines
    assert (
        "  t+25.0s..55.0s  observe             until every member is healthy "
        "(at least 2s, at most 30s)"
    ) in lines
    assert lines[-2:] == ["  write_unavailable_s <= 15", "  failover_s < 12.7"]


def test_the_plan_says_which_writes_the_ledger_counts_and_how_hello_is_awaited() -> None:
    kill = "  - {at: 5s, kind: host-kill, duration: 20s}\n"
    shared = render_plan(experiment(kill, "probes:\n  failover: {max_await: 2s}\n"))
    assert ("durability    the availability probe's acknowledged writes are the ledger (no "
            "writes of its own)") in shared  # fmt: skip
    assert "awaitable hello on each member (answered at least every 2s" in shared
    own = render_plan(experiment(kill, "probes:\n  durability: {write_concern: 1}\n"))
    assert "durability    numbered writes every 50ms, w:1, retries on" in own


def test_render_local_target_redacts_the_password() -> None:
    header = """\
name: local-plan
target:
  platform: local
  topology: psa
  uri: mongodb://app:hunter2@127.0.0.1:27017/?replicaSet=rs0
  members:
    - {host: "127.0.0.1:27017", start: "mongod --port 27017", dbpath: /data/a}
    - {host: "127.0.0.1:27018", start: "mongod --port 27018"}
"""
    text = render_plan(experiment("  - {at: 5s, kind: stepdown}\n", header=header))
    assert "hunter2" not in text
    assert "uri mongodb://app:***@127.0.0.1:27017/?replicaSet=rs0" in text
    assert "member 127.0.0.1:27017: started by `mongod --port 27017`, data in /data/a" in text
    assert "member 127.0.0.1:27018: started by `mongod --port 27018`, data in (not given)" in text
    assert "slo\n  none: the run reports its metrics and passes\n" in text


@pytest.mark.parametrize(
    ("platform", "section"),
    [("ec2", "ec2: {region: us-east-1}"), ("kubernetes", "kubernetes: {}")],
)
def test_a_discovered_target_is_named_by_its_platform(platform: str, section: str) -> None:
    """It read "a ec2 replica set"."""
    header = (f"name: p\ntarget:\n  platform: {platform}\n"
              f"  uri: mongodb://db1:27017/?replicaSet=rs0\n  {section}\n")  # fmt: skip
    text = render_plan(experiment("  - {at: 5s, kind: stepdown}\n", header=header))
    assert f"\n  a replica set on {platform}, rs3 expected; uri mongodb://db1:27017/" in text


def test_render_local_clock_skew_and_disk_fill_say_what_they_change_first() -> None:
    header = """\
name: local-plan
target:
  platform: local
  uri: mongodb://127.0.0.1:27017/?replicaSet=rs0
  members:
    - {host: "127.0.0.1:27017", start: "mongod --port 27017", dbpath: /data/a}
"""
    faults = ("  - {at: 5s, kind: clock-skew, duration: 5s}\n"
              "  - {at: 15s, kind: disk-fill, duration: 5s, fill_percent: 50}\n")  # fmt: skip
    text = render_plan(experiment(faults, header=header))
    assert "started again by its command under it, one at a time, the primary last" in text
    assert "fills the filesystem mounted at the member's dbpath (/data/a)" in text
    plain = render_plan(experiment("  - {at: 5s, kind: stepdown}\n", header=header))
    assert "libfaketime" not in plain and "disk-fill" not in plain


def test_render_notes_a_fault_before_the_steady_state() -> None:
    exp = experiment("  - {at: 1s, kind: stepdown}\n")
    assert "note: the first fault (t+1.0s) comes before 2s of steady state" in render_plan(exp)


SHARDED = """\
name: plan-test
target: {platform: sandbox, topology: sharded%s}
"""
SHARD_KILL = "  - {at: 5s, kind: host-kill, select: {shard: shard0, role: primary}, duration: 5s}\n"


def test_the_plan_says_the_balancer_is_stopped_for_the_run() -> None:
    held = experiment(SHARD_KILL, "guards: {stop_balancer: true}\n", header=SHARDED % "")
    plan = render_plan(held)
    assert ("balancer: stopped for the run (guards.stop_balancer): balancerStop on a router "
            "after the guards, before the probes and the first fault; balancerStart once the "
            "faults are reverted, only if it was on") in plan  # fmt: skip
    assert [n for n in plan_data(held)["notes"] if n.startswith("balancer: stopped")]
    off = experiment(SHARD_KILL, "guards: {stop_balancer: true}\n",
                     header=SHARDED % ", balancer: false")  # fmt: skip
    assert "balancer: off in this sandbox (balancer: false): guards.stop_balancer leaves" in (
        render_plan(off)
    )
    assert "balancer:" not in render_plan(experiment(SHARD_KILL, header=SHARDED % ""))


@pytest.mark.parametrize(
    ("uri", "redacted"),
    [
        ("mongodb://u:p@h:1/", "mongodb://u:***@h:1/"),
        ("mongodb+srv://u:p%40ss@cluster.example/db", "mongodb+srv://u:***@cluster.example/db"),
        ("mongodb://h:1,h:2/?replicaSet=rs0", "mongodb://h:1,h:2/?replicaSet=rs0"),
    ],
)
def test_redact_uri(uri: str, redacted: str) -> None:
    assert redact_uri(uri) == redacted


def test_planning_touches_no_network_and_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("planning must have no side effects")

    exp = experiment("  - {at: 5s, kind: host-kill, duration: 20s}\n")
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert "inject" in render_plan(exp)


def test_journal_commit_interval_reaches_the_plan_the_members_and_mongod(tmp_path) -> None:
    exp = experiment("  - {at: 5s, kind: host-kill, duration: 2s}\n",
                     header=HEADER + "  journal_commit_interval: 500ms\n")  # fmt: skip
    assert "journal committed every 500 ms" in render_plan(exp)
    target = SandboxTarget(exp.target, tmp_path)
    assert target.spec.journal_commit_interval_ms == 500
    sandbox = Sandbox(tmp_path)
    target.spec.write(tmp_path)
    argv = MongodEngine("mongod").argv(sandbox, target.spec.members[0], init=True)
    assert argv[argv.index("--journalCommitInterval") + 1] == "500"
    # Unset: MongoDB's 100 ms, said nowhere in the plan.
    plain = experiment("  - {at: 5s, kind: host-kill, duration: 2s}\n")
    assert "journal committed" not in render_plan(plain)
    assert SandboxTarget(plain.target, tmp_path).spec.journal_commit_interval_ms == 100


@pytest.mark.parametrize("value", ["0ms", "501ms", "1s"])
def test_journal_commit_interval_outside_mongods_range_is_refused(value: str) -> None:
    with pytest.raises(ExperimentError, match="journal_commit_interval"):
        experiment("  - {at: 5s, kind: host-kill, duration: 2s}\n",
                   header=HEADER + f"  journal_commit_interval: {value}\n")  # fmt: skip


def test_journal_commit_interval_of_a_set_not_built_here_is_refused() -> None:
    header = ("name: plan-test\ndescription: d\ntarget:\n  platform: local\n  topology: rs1\n"
              "  uri: mongodb://127.0.0.1:27017/\n  journal_commit_interval: 200ms\n"
              "  members: [{host: '127.0.0.1:27017', start: mongod}]\n")  # fmt: skip
    with pytest.raises(ExperimentError, match=r"journal_commit_interval.*shapes a sandbox"):
        experiment("  - {at: 5s, kind: host-kill, duration: 2s}\n", header=header)


def test_the_plan_shows_the_sandbox_s_zones_and_the_majority_a_zone_holds() -> None:
    header = HEADER + "  zones: [east, east, west]\n"
    text = render_plan(experiment("  - {at: 5s, kind: stepdown}\n", header=header))
    assert "zone east: member 0, member 1; zone west: member 2" in text
    assert "zone east holds 2 of 3 votes" in text
    spread = render_plan(experiment("  - {at: 5s, kind: stepdown}\n",
                                    header=HEADER + "  zones: [a, b, c]\n"))  # fmt: skip
    assert "zone a: member 0; zone b: member 1; zone c: member 2" in spread
    assert "votes" not in spread


def test_more_zones_than_a_set_s_members_or_a_standalone_s_are_refused() -> None:
    with pytest.raises(ExperimentError, match=r"zones.*a zone nobody is in"):
        experiment("  - {at: 5s, kind: stepdown}\n", header=HEADER + "  zones: [a, b, c, d]\n")
    standalone = HEADER.replace("rs3", "standalone") + "  zones: [a]\n"
    with pytest.raises(ExperimentError, match="standalone server has none"):
        experiment("  - {at: 5s, kind: host-kill, duration: 5s}\n", header=standalone)
    # A sharded sandbox spreads them over each set: no set may have fewer members than zones.
    sharded = HEADER.replace("rs3", "sharded") + "  zones: [a, b]\n"
    experiment("  - {at: 5s, kind: stepdown, select: {shard: shard0}}\n", header=sharded)
    with pytest.raises(ExperimentError, match=r"zones: 2 zones for 1 member.*the smallest set"):
        experiment("  - {at: 5s, kind: stepdown, select: {shard: shard0}}\n",
                   header=sharded + "  shard_topology: rs1\n")  # fmt: skip


@pytest.mark.parametrize(
    ("timings", "noted"),
    [
        ("  election_timeout: 1s\n", True),  # the default 2 s heartbeat
        ("  election_timeout: 2s\n  heartbeat_interval: 2s\n", True),
        ("  election_timeout: 1s\n  heartbeat_interval: 200ms\n", False),
        ("", False),  # MongoDB's defaults: 2 s of 10 s
    ],
)
def test_render_notes_an_election_timeout_no_longer_than_the_heartbeat(
    timings: str, noted: bool
) -> None:
    text = render_plan(experiment("  - {at: 5s, kind: stepdown}\n", header=HEADER + timings))
    assert ("is not shorter than the election timeout" in text) is noted, text


def test_the_plan_names_each_member_s_priority() -> None:
    from pathlib import Path

    from rsdrill.experiment.loader import load_experiment

    catalog = Path(__file__).parents[2] / "experiments"
    exp = load_experiment(catalog / "zones-5-2-2-1-lose-one.yaml")
    text = render_plan(exp)
    assert "zone a: member 0, member 3; zone b: member 1, member 4; zone c: member 2" in text
    assert "priorities: member 0: 2, member 1: 1, member 2: 0.5, member 3: 2, member 4: 1" in text
