"""The runner: set up the target, start the probes, inject and revert faults on schedule, watch
the recovery, judge, report — and undo every fault whatever happens (success, failure, an
error, Ctrl-C, SIGTERM). A run that dies anyway leaves a journal for `rsdrill recover`.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rsdrill.connection import SettingsError
from rsdrill.deployment import Deployment, inspect_any
from rsdrill.engine.applied import Applied, RunState
from rsdrill.engine.balancer import BalancerHold
from rsdrill.engine.events import RunEvents
from rsdrill.engine.forced_reconfig import MajorityRecovery
from rsdrill.engine.guards import check_domains, check_guards, wait_healthy
from rsdrill.engine.journal import Journal
from rsdrill.engine.live import LiveView
from rsdrill.engine.observe import observe
from rsdrill.engine.options import RunOptions, install_signal_handlers, restore_signal_handlers
from rsdrill.engine.outcome import (
    fault_options,
    fault_result,
    internal_error,
    random_schedule,
    target_info,
)
from rsdrill.engine.schedule import Action, build_schedule
from rsdrill.engine.selection import (
    SelectionError,
    concrete_domain,
    lands_in,
    layout_of,
    member_placements,
    placements_for,
    replica_sets,
    resolve,
    roles_now,
)
from rsdrill.engine.steps import StepFailed, run_step, step_environment
from rsdrill.engine.stop_watch import EXIT_STOPPED, StopWatch
from rsdrill.errors import GuardRefusal
from rsdrill.experiment.catalog import approximation
from rsdrill.experiment.schema import Experiment, Fault, SelectDomain, SelectMember
from rsdrill.history import FaultRecord, History, Op, RunClock
from rsdrill.layout import ShardedLayout
from rsdrill.platforms.base import (
    InjectionError,
    Injector,
    RunTarget,
    TargetError,
    injector_factory,
    platform,
)
from rsdrill.platforms.domain_members import platform_places
from rsdrill.redact import redact_uri
from rsdrill.report.integrations import integrations
from rsdrill.result import (
    EXIT_CODES,
    AuditResult,
    Metrics,
    Result,
    RunClockInfo,
    Verdict,
)
from rsdrill.version import __version__

if TYPE_CHECKING:
    from rsdrill.engine.rollbacks import RollbackWatch

_log = logging.getLogger(__name__)

PREFLIGHT_TIMEOUT_S = 60.0
VERIFY_TIMEOUT_S = 10.0
# How long a fault waits for its `select:` role to exist (an election in progress has no primary):
# MongoDB's default election timeout, its random offset and a new primary's drain.
SELECT_WAIT_S = 15.0
SELECT_POLL_S = 0.1


class Aborted(Exception):
    """SIGINT/SIGTERM (or an abort condition): stop injecting, revert, verdict aborted."""


def make_target(exp: Experiment, out_dir: Path) -> RunTarget:
    """The experiment's target, from its platform (which imports its SDK only now)."""
    return platform(exp.target.platform).make_target(exp, out_dir)


class Runner:
    def __init__(self, experiment: Experiment, options: RunOptions) -> None:
        self.exp = experiment
        self.options = options
        self.run_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
        self.history = History()
        self.clock = RunClock.start()
        self.state = RunState()
        self.live = LiveView(self.history)
        self.events = RunEvents((*options.plugins, *integrations(experiment, lambda: self.clock)))
        self._abort = threading.Event()
        # Why the run was aborted when it was not a signal (an abort condition held).
        self._abort_reason: str | None = None
        self._watch: StopWatch | None = None
        self._exit_code: int | None = None  # a fleet stop's, instead of the verdict's
        self._reverting = False
        # Set with (after) `_abort` or `_revert_now`, so a waiting run wakes up at once.
        self._wake = threading.Event()
        self._revert_now = threading.Event()
        self._journal: Journal | None = None
        self._slide_s = 0.0
        self._verdict_final = False
        self._signal_fd = -1  # the write end of `_watch_signals`'s pipe, while `run` runs
        # The first SIGINT/SIGTERM's name: a caller of many runs (the soak) stops after this one.
        self.signalled: str | None = None
        # What the target's members said they are, for the result (None: none answered).
        self._deployment: Deployment | None = None
        # The data audit after the run (experiment `audit:`), None when not run.
        self._audit: AuditResult | None = None
        # What the members' rollbacks stood at before the faults (only for an audit).
        self._rollback_watch: RollbackWatch | None = None
        # A sharded target's sets and routers.
        self._layout: ShardedLayout | None = None
        self._zones: dict[str, str] = {}  # member → zone, as placed when the guards ran
        # guards.stop_balancer: the balancer stopped after the guards, restored with the faults.
        self.balancer = BalancerHold(experiment.guards.stop_balancer, self.live.event)
        # recovery.force_reconfig: when due (None: not asked), and its undo after the faults.
        self.recovery = MajorityRecovery(experiment.recovery, self.live.event)
        self._recover_at: float | None = None

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> Result:
        """Carry the experiment out; always returns a Result (reports written)."""
        # First of all: a signal from here on stops the run through its own handler, until the
        # result is written (a signal then changes nothing), or the run fails to begin (its
        # directories): the caller's handlers are back either way.
        self._watch_signals()
        previous = install_signal_handlers(self._on_signal)
        try:
            return self._run()
        finally:
            restore_signal_handlers(previous)
            os.close(self._signal_fd)  # its watcher ends

    def _run(self) -> Result:
        self.options.out_dir.mkdir(parents=True, exist_ok=True)
        started_wall = dt.datetime.now(dt.UTC)
        journal = Journal.open_run(self.run_id, self.exp.name, self.options.journal_dir)
        self._journal = journal
        console, gate = self.options.console, self.options.gate
        target: RunTarget | None = None
        probes = None
        verdict: Verdict = "error"
        error: str | None = None
        metrics = Metrics()
        slo_results: list[Any] = []
        if self.options.live:
            self.live.start()
        self.events.emit("run_started", experiment=self.exp.name, run_id=self.run_id,
                         out_dir=self.options.out_dir)  # fmt: skip
        try:
            self._phase("setup")
            self._check_gate()
            if gate is not None:  # before anything reaches the cluster
                gate.hold()
            target = make_target(self.exp, self.options.out_dir)
            resource = target.recover_action()
            if resource:
                journal.write("resource", key="resource:target", revert=resource)
            target.setup()
            self._layout = layout_of(target)  # a cluster found from its routers: by `setup`
            target.prepare()
            # Every fault's injector imported now, before the clock: at the fault's moment the
            # import of its modules made the first fault 25 ms late.
            for fault in self.exp.faults:
                injector_factory(platform(target.platform), fault.kind)
            # rsdrill's own wire-level probes, guards, selection and injectors reach members as
            # the target's URI says (TLS, the login): everything below is given these.
            # A sharded cluster is what its routers say it is.
            asked = list(self._layout.routers) if self._layout else target.members
            self._deployment = inspect_any(asked, options=target.connect_options)
            if resource and target.keep:
                # A kept target is the user's once built: only a half-built one is undone.
                journal.write("released", key="resource:target")
            self._check_gate()
            self._phase("preflight")
            self._preflight(target)
            self._phase("guards")
            self._check_guards(target)
            self.balancer.stop(self._layout, target.connect_options, journal)
            self._recover_at = self.recovery.due_at(self.exp.faults, target.members,
                                                    target.connect_options,
                                                    platform_places(target))  # fmt: skip
            from rsdrill.probes import ProbeSet

            probes = ProbeSet(self.exp.probes, uri=target.uri, members=target.members,
                              options=target.connect_options, history=self.history,
                              run_id=self.run_id, standalone=self._standalone,
                              layout=self._layout)  # fmt: skip
            probes.prepare()
            if self.exp.audit != "off" and not self._standalone:
                from rsdrill.engine.rollbacks import watch_rollbacks

                self._rollback_watch = watch_rollbacks(target)
            self._check_abort()
            self.clock = RunClock.start()
            self.live.clock = self.clock
            self.live.faults = self.state.records
            probes.start(self.clock)
            self._watch = StopWatch((*self.exp.abort_on, *self.options.abort_on), gate,
                                    self.history, self.clock, self._stop_for)  # fmt: skip
            self._watch.start()
            self._phase("faults")
            if console is not None:
                console.start(self._on_key)
            self._run_schedule(target, journal)
            self._phase("observe")
            observe(self.exp, target, self.clock, self.history, self._layout, self._sleep)
            verdict = "pass"
        except Aborted:
            verdict, error = "aborted", self._abort_reason or "aborted by signal"
        except GuardRefusal as exc:
            verdict, error = "aborted", redact_uri(str(exc))
        except (TargetError, InjectionError, SelectionError, StepFailed, SettingsError) as exc:
            verdict, error = "error", redact_uri(str(exc))
        except Exception as exc:  # an internal error still reverts, reports and exits 4
            verdict, error = "error", redact_uri(internal_error(exc))
        finally:
            if console is not None:
                console.stop()
            if self._watch is not None:
                self._watch.stop()
            self._phase("revert")
            revert_error = self._revert_all(journal)
            if revert_error and verdict != "error":
                verdict, error = "error", revert_error
            auditing = self.exp.audit != "off" and target is not None and verdict == "pass"
            if probes is not None and probes.probes:
                self._phase("analyze")
                readback_s = (self.exp.probes.durability.readback_timeout
                              if self.exp.probes.durability else 0)  # fmt: skip
                probes.stop(readback_timeout_s=readback_s, drop=not auditing)
            if auditing and target is not None:
                # The probes stopped (nothing writes) with their data still there, every fault
                # reverted: do the members hold the same data?
                self._phase("audit")
                from rsdrill.engine.audit import run_audit

                self._audit = run_audit(
                    target, quick=self.exp.audit == "quick", standalone=self._standalone,
                    watch=self._rollback_watch, probes=probes, ops=self.history,
                )  # fmt: skip
                if probes is not None and probes.probes:
                    probes.drop_probe_collections()
            duration = self.clock.now()
            if len(self.history):
                # Judging is pure, but a bug in it must not cost the teardown, the journal's
                # end or the result: the run then ends in an error that says so.
                try:
                    metrics, slo_results, judged = self._judge(duration)
                    if verdict == "pass":
                        verdict = judged
                except Exception as exc:
                    metrics, slo_results = Metrics(), []
                    if verdict != "error":
                        verdict, error = (
                            "error",
                            redact_uri(f"analysis failed: {internal_error(exc)}"),
                        )
            if target is not None:
                self._phase("teardown")
                try:
                    target.teardown()
                    journal.write("released", key="resource:target")
                except TargetError as exc:
                    verdict, error = "error", f"teardown: {exc}"
                except Exception as exc:
                    verdict, error = "error", redact_uri(f"teardown: {internal_error(exc)}")
            if gate is not None:
                gate.release()
            if not revert_error:
                journal.write("end", verdict=verdict)  # else `rsdrill recover` finishes it
            journal.close()
            self.live.stop()
        return self._result(verdict, error, started_wall, target, metrics, slo_results)

    def _result(
        self,
        verdict: Verdict,
        error: str | None,
        started_wall: dt.datetime,
        target: RunTarget | None,
        metrics: Metrics,
        slo_results: list[Any],
    ) -> Result:
        """The run's result, written to the output directory with every report."""
        # From here the verdict is final: a signal has nothing left to stop (set before the
        # check, so one that comes in between is still seen by it).
        self._verdict_final = True
        if self._abort.is_set() and verdict in ("pass", "fail"):
            # A signal during the final revert, the analysis or the teardown aborts the run too.
            verdict, error = "aborted", self._abort_reason or "aborted by signal"
        result = Result(
            experiment=self.exp.name,
            verdict=verdict,
            exit_code=(verdict == "aborted" and self._exit_code) or EXIT_CODES[verdict],
            started_at=started_wall.isoformat(),
            duration_s=round(self.clock.now(), 3),
            target=target_info(self.exp, target, self._standalone, self._zones, self._deployment),
            faults=[fault_result(r) for r in self.state.records],
            metrics=metrics,
            slo=slo_results,
            error=error,
            clock=RunClockInfo(t0_monotonic=self.clock.mono0, t0_wall=self.clock.wall0),
            rsdrill_version=__version__,
            random_schedule=random_schedule(self.exp),
            audit=self._audit,
            balancer=self.balancer.held,
            recovery=self.recovery.done,
            ignored_monitors=self._watch.ignored if self._watch else [],
        )
        self.events.emit("verdict", result=result)
        self.events.emit("run_finished", result=result, ops=self.history,
                         out_dir=self.options.out_dir)  # fmt: skip
        return result

    def _judge(self, duration_s: float) -> tuple[Metrics, list[Any], Verdict]:
        from rsdrill.analysis.audit import audit_figures
        from rsdrill.analysis.majority_rto import majority_rto
        from rsdrill.analysis.metrics import compute_metrics
        from rsdrill.analysis.recovery import restart_phases
        from rsdrill.analysis.rollbacks import rollback_figures
        from rsdrill.analysis.slo import evaluate, verdict

        ops = self.history
        metrics = compute_metrics(
            ops, self.state.records, duration_s=duration_s, standalone=self._standalone,
            transactions_model=self.exp.probes.transactions_model,
            sets=self._layout.sets() if self._layout else None,
        )  # fmt: skip
        metrics.divergent_members, metrics.audit_lag_s, metrics.validate_errors = audit_figures(
            self._audit
        )
        metrics.rolled_back_writes, metrics.rolled_back_acknowledged_writes = rollback_figures(
            self._audit
        )
        for record in self.state.records:
            ha = record.detail.get("ha")  # a host restarted as HA would: its phases, measured
            if isinstance(ha, dict):
                boot_s = ha["model"]["boot_s"]  # None: the host booted by itself (a VM)
                ha.update(restart_phases(ops, self.state.records, record, boot_s=boot_s))
        if self.recovery.done is not None:
            self.recovery.done.rto = majority_rto(ops, self.recovery.done)
        results = evaluate(metrics, self.exp.slo)
        return metrics, results, verdict(results)

    @property
    def _standalone(self) -> bool:
        return self._deployment is not None and self._deployment.is_standalone

    # -- phases ----------------------------------------------------------------------------

    def _phase(self, name: str) -> None:
        self.live.set_phase(name)
        self.events.emit("phase", name=name)
        if self.options.on_phase:
            self.options.on_phase(name)

    def _preflight(self, target: RunTarget) -> None:
        wait_healthy(target.members, replica_sets(target), options=target.connect_options,
                     timeout_s=PREFLIGHT_TIMEOUT_S, sleep=self._sleep)  # fmt: skip

    def _check_guards(self, target: RunTarget) -> None:
        placed = member_placements(target)  # also the report's strip of each zone
        self._zones = {p.host: p.zone for p in placed if p.zone}
        if self._layout is not None:
            check_domains(self.exp.faults, placed)  # a zone no set has a member in
        for name, hosts in replica_sets(target).items():
            exp, note = self.exp, self._noted("")
            if self._layout is not None:  # each set's guards, for the faults that can land in it
                faults = [f for f in exp.faults if lands_in(f, name, self._layout, placed)]
                exp, note = exp.model_copy(update={"faults": faults}), self._noted(name)
            check_guards(exp, hosts, options=target.connect_options, env=os.environ,
                         assume_yes=self.options.assume_yes,
                         confirm=self._confirm if self.options.confirm else None, note=note,
                         sleep=self._sleep, places=platform_places(target))  # fmt: skip
        self._check_abort()

    def _noted(self, name: str) -> Callable[[str], None]:
        """Guard notes of the set `name` (of a sharded target; "": the only set)."""
        return lambda line: self.live.event(f"{name}: {line}" if name else line)

    def _confirm(self, question: str) -> bool:
        """Ask the user; Ctrl-C at the prompt is a no (the run's handler would only flag it)."""
        assert self.options.confirm is not None
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
        try:
            return self.options.confirm(question)
        except KeyboardInterrupt:
            return False
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _run_schedule(self, target: RunTarget, journal: Journal) -> None:
        for action in build_schedule(self.exp.faults, self.exp.steps, self._recover_at):
            while True:
                if action.what == "revert" and not any(
                    a.record.index == action.index for a in self.state.applied.values()
                ):
                    break  # reverted early (game day), or never injected: nothing to wait for
                # Time spent answering game-day questions slides the rest of the timeline.
                at_s = action.at_s + self._slide_s
                if action.what == "revert":
                    after = self.exp.faults[action.index].revert_after
                    at_s = max(at_s, self.state.held_until(action.index, after))
                if self.clock.now() >= at_s:
                    if action.what == "inject":
                        self._inject(action, target, journal)
                    elif action.what == "step":
                        self._run_step(action.index, target)
                    elif action.what == "recover":
                        self.recovery.force(target.members, target.connect_options, journal,
                                            self.clock.now, self._sleep)  # fmt: skip
                    else:
                        self._revert_fault(action.index, journal, at_s)
                    break
                self._sleep_until(at_s)

    def _inject(self, action: Action, target: RunTarget, journal: Journal) -> None:
        """Inject the fault on every member its selection names, then verify each: the members
        of a zone (or a `count:`) are hit together, not one per verification (a partition's
        takes about a second, long enough for an election among the rest)."""
        states, hosts, fault = self._select(self.exp.faults[action.index], target)
        injected: list[tuple[str, FaultRecord, Injector]] = []
        for host in hosts:
            self._check_abort()  # a `count:` fault stops between members too
            injector = _injector(fault, host, target)
            if not self._confirmed(injector, states[host]):
                continue
            # The role, fault index and options let `rsdrill replay --from` do it again.
            record = FaultRecord(action.index, fault.kind, host,
                                 due_at_s=round(action.at_s + self._slide_s, 4),
                                 approximation=approximation(self.exp.target.platform, fault),
                                 detail={"plan": injector.describe(), "role": states[host],
                                         "index": action.index,
                                         "options": fault_options(fault)})  # fmt: skip
            key = f"fault:{action.index}:{host}"
            journal.write("intent", key=key, kind=fault.kind, target=host,
                          revert=injector.revert_action())  # fmt: skip
            self.state.records.append(record)
            if injector.revert_action() is not None:
                # Registered before the attempt: a half-applied fault is reverted too.
                self.state.applied[key] = Applied(record, injector, key)
            record.injected_at_s = round(self.clock.now(), 4)
            injector.inject()
            applied_at = record.applied_at_s = round(self.clock.now(), 4)
            self.state.in_force_s.setdefault(action.index, []).append(applied_at)
            journal.write("applied", key=key)
            self.live.acted("injected", record)
            injected.append((host, record, injector))
        for host, record, injector in injected:
            if not injector.verify(VERIFY_TIMEOUT_S):
                raise InjectionError(
                    f"{fault.kind} on {host} did not take effect within {VERIFY_TIMEOUT_S:.0f}s"
                )
            record.verified_at_s = round(self.clock.now(), 4)
            self.events.emit("fault_applied", fault=record)

    def _select(self, fault: Fault, target: RunTarget) -> tuple[dict[str, str], list[str], Fault]:
        """The members `select:` names now, and the fault as it lands on them (a zone named by
        what its loss costs, named). A role nobody holds yet (no primary while an election
        runs, a secondary still down) is waited for, up to SELECT_WAIT_S, and the rest of the
        timeline slides by the wait, as it does for a game-day question; a member named by its
        address is not waited for."""
        started, retried, placed = time.monotonic(), False, placements_for(fault.select, target)
        while True:
            changed = (t for r in self.state.records
                       for t in (r.injected_at_s, r.verified_at_s, r.reverted_at_s))  # fmt: skip
            states = roles_now(target, self._layout, self.exp.probes.failover,
                               lambda since_s: self.history.ops("failover", since_s=since_s),
                               max((t for t in changed if t is not None), default=0.0),
                               self.clock.now())  # fmt: skip
            try:
                hosts = resolve(fault.select, states, self._layout, placed)
            except SelectionError:
                named = isinstance(fault.select, SelectMember)
                if named or time.monotonic() - started >= SELECT_WAIT_S:
                    raise
                retried = True
                self._sleep(SELECT_POLL_S)
                continue
            if retried:
                waited = time.monotonic() - started
                self._slide_s += waited
                self.live.event(f"{fault.kind}: select {fault.select} matched after {waited:.1f}s")
            if isinstance(fault.select, SelectDomain) and fault.select.domains:
                zone = concrete_domain(fault.select, states, placed)
                fault = fault.model_copy(update={"select": zone})
            return states, hosts, fault

    def _run_step(self, index: int, target: RunTarget) -> None:
        """Run one of the user's steps to its end; the history records when and how it went."""
        step = self.exp.steps[index]
        env = step_environment(target, self.options.out_dir)
        self.live.event(f"step {step.name}: {step.run}")
        t_start = self.clock.now()
        detail: dict[str, Any] = {"marks": step.marks, "index": index}
        key = f"resource:step:{index}"
        assert self._journal is not None
        journal = self._journal

        def journaled(action: dict[str, object]) -> None:
            journal.write("resource", key=key, revert=action)

        try:
            run_step(step, env, self.options.out_dir / "steps", self._sleep, journaled)
        except StepFailed as exc:
            self.history.append(Op("step", step.name, None, t_start, self.clock.now(), "error",
                                   {**detail, "error": str(exc)}))  # fmt: skip
            raise
        finally:
            journal.write("released", key=key)  # run_step never returns with it running
        self.history.append(Op("step", step.name, None, t_start, self.clock.now(), "ok", detail))
        self.live.event(f"step {step.name}: done in {self.clock.now() - t_start:.1f}s")

    def _confirmed(self, injector: Injector, role: str) -> bool:
        """Game-day mode: the user says yes, skip (False) or abort (raised) for each fault."""
        console = self.options.console
        if console is None:
            return True
        asked_at = time.monotonic()
        answer = console.ask(
            f"next: {injector.kind} on {injector.target} ({role}): {injector.describe()}. "
            "Inject it? [y]es, [s]kip, [a]bort",
            "ysa",
            cancelled=self._abort,
        )
        self._slide_s += time.monotonic() - asked_at
        if answer == "a" and not self._abort.is_set():
            self._abort_reason = "aborted from the keyboard"
            self._stop_run()
        self._check_abort()
        if answer == "s":
            self.live.event(f"skipped {injector.kind} on {injector.target}")
            return False
        return True

    def _revert_fault(self, index: int, journal: Journal, due_s: float) -> None:
        for key in [k for k, a in self.state.applied.items() if a.record.index == index]:
            self.state.applied[key].record.revert_due_at_s = round(due_s, 4)
            self._revert(self.state.applied.pop(key), journal)

    def _revert(self, applied: Applied, journal: Journal) -> None:
        applied.record.reverted_at_s = round(self.clock.now(), 4)
        try:
            applied.injector.revert()
        except BaseException:
            applied.record.reverted_at_s = None  # still in force: `recover` owes it
            raise
        # An engine that judges its own fault (Litmus: verdict, probe success) says so here.
        report = getattr(applied.injector, "report", None)
        if report is not None:
            applied.record.detail.update(report())
        journal.write("reverted", key=applied.key)
        self.live.acted("reverted", applied.record)
        self.events.emit("fault_reverted", fault=applied.record)

    def _revert_all(self, journal: Journal) -> str | None:
        """Revert everything still in force, whatever any one revert raises; the first
        failure's message, if any (the failed fault stays in the journal for `recover`)."""
        self._reverting = True
        failure = None
        try:
            for key in list(self.state.applied)[::-1]:
                applied = self.state.applied.pop(key)
                try:
                    self._revert(applied, journal)
                except (InjectionError, TargetError, OSError) as exc:
                    failure = failure or f"revert failed (run `rsdrill recover`): {exc}"
                except Exception as exc:  # a driver's, an SDK's or our own bug: still go on
                    _log.error("reverting %s on %s failed", applied.record.kind,
                               applied.record.target, exc_info=True)  # fmt: skip
                    message = redact_uri(internal_error(exc))
                    failure = failure or f"revert failed (run `rsdrill recover`): {message}"
            # Once the faults are reverted (or failed to be): the balancer, if this run stopped it.
            restored = self.balancer.restore(journal)
            healed = self.recovery.heal(journal, self.clock.now)  # the members a reconfig left
            failure = failure or restored or healed
        finally:
            self._reverting = False
        return failure

    # -- waiting and signals ----------------------------------------------------------------

    def _stop_for(self, reason: str, exit_code: int | None) -> None:
        """Stop the run from outside its schedule (an abort condition, the fleet's gate)."""
        if self._abort.is_set():
            return  # a signal came first: its reason stands
        self._abort_reason, self._exit_code = reason, exit_code
        self.live.event(f"{reason}: stopping, reverting every fault")
        self._stop_run()

    def _check_gate(self) -> None:
        stopped = self.options.gate.stopped() if self.options.gate is not None else None
        if stopped is not None and not self._abort.is_set():
            self._abort_reason, self._exit_code = stopped, EXIT_STOPPED
            self._abort.set()
        self._check_abort()

    def _check_abort(self) -> None:
        if self._abort.is_set():
            raise Aborted

    def _sleep(self, seconds: float) -> None:
        """Wait; an abort is raised, an early-revert request is carried out and ends the wait
        (so the schedule can drop what it no longer has to wait for)."""
        deadline = time.monotonic() + max(seconds, 0)
        while True:
            if self._wake.wait(max(deadline - time.monotonic(), 0)):
                self._wake.clear()
            self._check_abort()
            if self._revert_now.is_set():
                self._revert_now.clear()
                self._revert_early()
                return
            if time.monotonic() >= deadline:
                return

    def _revert_early(self) -> None:
        if not self.state.applied:
            self.live.event("revert requested: no fault is in force")
            return
        self.live.event("revert requested: reverting the faults in force now")
        assert self._journal is not None
        for key in list(self.state.applied)[::-1]:
            applied = self.state.applied.pop(key)
            applied.record.detail["reverted_early"] = True
            self._revert(applied, self._journal)

    def _sleep_until(self, at_s: float) -> None:
        self._sleep(at_s - self.clock.now())

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # On the main thread between two of its bytecodes, which may hold a lock then (an
        # Event's as a wait begins: a run signalled so deadlocked on `_wake`): so a byte to
        # `_watch_signals`, which takes no lock here.
        self.signalled = self.signalled or signal.Signals(signum).name
        os.write(self._signal_fd, bytes([signum]))

    def _watch_signals(self) -> None:
        """A thread that stops the run for each signal `_on_signal` passes on through a pipe,
        until `run` closes it."""
        read_fd, self._signal_fd = os.pipe()
        threading.Thread(target=self._stop_on_signals, args=(read_fd,), name="rsdrill-signals",
                         daemon=True).start()  # fmt: skip

    def _stop_on_signals(self, read_fd: int) -> None:
        while received := os.read(read_fd, 1):
            if self._verdict_final:
                continue
            if self._reverting or self._abort.is_set():
                self.live.stopping()
                continue
            self.live.event(f"{signal.Signals(received[0]).name}: stopping, reverting every fault")
            self._stop_run()
        os.close(read_fd)

    def _stop_run(self) -> None:
        self._abort.set()
        self._wake.set()

    def _on_key(self, key: str) -> None:
        """Game-day keys: `r` reverts the faults in force now, `a` aborts the run."""
        if key == "a" and not self._abort.is_set():
            self._abort_reason = "aborted from the keyboard"
            self.live.event("abort requested: stopping, reverting every fault")
            self._stop_run()
        elif key == "r":
            self._revert_now.set()
            self._wake.set()


def _injector(fault: Fault, host: str, target: RunTarget) -> Injector:
    return injector_factory(platform(target.platform), fault.kind)(target, fault, host)


def run_experiment(experiment: Experiment, options: RunOptions) -> Result:
    return Runner(experiment, options).run()
