"""Formatting shared by the JUnit, Markdown and HTML reports, so all three name things alike."""

from __future__ import annotations

from decimal import Decimal

from rsdrill.analysis.slo import compare
from rsdrill.result import AuditResult, FaultResult, Metrics, Result, ServerInfo, SloResult

# Which metrics are "scalar" is decided by value type, so a metric added to `Metrics` later shows up
# in every report without touching this module; lists (member_states, lost seqs) are left to the
# places that can draw or count them.
Scalar = float | int | None


def scalar_metrics(metrics: Metrics) -> list[tuple[str, Scalar]]:
    """Every scalar metric as (dotted name, value), nested models and dicts flattened.

    `failover_parts.election_s`, `recovery_s.127.0.0.1:28017`, `latency_ms.p99`; None stays None.
    """
    rows: list[tuple[str, Scalar]] = []

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}", sub)
        elif value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            rows.append((prefix, value))

    for name, value in metrics.model_dump().items():
        walk(name, value)
    return rows


def describe_server(server: ServerInfo | None) -> str:
    """One line on what was measured, so a sandbox figure is never read as mongod's."""
    if server is None:
        return "unknown (no member answered)"
    what = "rsdrill's emulator" if server.emulator else "MongoDB"
    parts = [f"{what} {server.version or '(version unknown)'}", server.topology]
    if server.set_name:
        parts[-1] += f" {server.set_name}"
    parts.append("hello" if server.handshake == "hello" else "isMaster only (no hello)")
    if server.storage_engine:
        parts.append(f"storage {server.storage_engine}")
    parts.append("TLS" if server.tls else "no TLS")
    parts.append(f"login {server.auth_mechanism}" if server.auth_mechanism else "no login")
    return ", ".join(parts)


def fmt_number(value: Scalar, unit: str = "") -> str:
    """A number for people: integers without ".0", floats to 3 decimals, None as "n/a"."""
    if value is None:
        return "n/a"
    if isinstance(value, int) or float(value).is_integer():
        text = str(int(value))
    else:
        text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{text} {unit}".rstrip()


def slo_condition(slo: SloResult) -> str:
    """`<= 15`: the SLO's operator and threshold as written in the experiment file (not to 3
    decimals: `<= 0.0005` read `<= 0`)."""
    text = fmt_number(slo.threshold)
    if float(text) != slo.threshold:  # the shortest exact digits, never 1e-05
        text = format(Decimal(repr(float(slo.threshold))), "f")
    return f"{slo.op} {text}"


def slo_observed(slo: SloResult) -> str:
    """The observed value to 3 decimals, or to as many more as it takes to read on the side of
    the threshold it is on: 15.0004 against `<= 15` read "15", FAIL."""
    if slo.observed is None:
        return "not measured"
    text = fmt_number(slo.observed)
    digits = 4
    while compare(float(text), slo.op, slo.threshold) != slo.passed and digits <= 17:
        text, digits = f"{slo.observed:.{digits}g}", digits + 1
    return text


def slo_outcome(result: Result, slo: SloResult) -> str:
    """ "pass", "FAIL", or "not judged": a violation seen before a run stopped stands, but a
    pass needs the whole run; an aborted run, or one that ended in an error, measured only part
    of what its SLOs are about (a write gap still open when it stopped reads short)."""
    if not slo.passed:
        return "FAIL"
    return "pass" if result.verdict in ("pass", "fail") else "not judged"


def slo_title(slo: SloResult) -> str:
    """`write_unavailable_s <= 15`: the name of the SLO's JUnit testcase and table row."""
    return f"{slo.metric} {slo_condition(slo)}"


def slo_explanation(slo: SloResult) -> str:
    """One sentence saying what was required and what was observed."""
    verb = "held" if slo.passed else "violated"
    return f"{slo.metric} = {slo_observed(slo)}; required {slo_condition(slo)}: {verb}"


NOTABLE_STALL_S = 0.5
"""From this long, a stall of rsdrill's own process is said after the verdict and in the reports."""


def stall_line(metrics: Metrics) -> str | None:
    """The longest stall of rsdrill's own process and the availability gaps it overlaps, in one
    line; None when it was shorter than `NOTABLE_STALL_S`. `probes: this process stalled 2.1 s
    at t=14.2 s; the write gap 13.9-16.2 s overlaps it: it may be this machine's, not the
    cluster's`."""
    if not metrics.probe_stalls or metrics.probe_stalls[0].seconds < NOTABLE_STALL_S:
        return None
    stall = metrics.probe_stalls[0]
    line = f"probes: this process stalled {stall.seconds:.1f} s at t={stall.at_s:.1f} s; "
    gaps = [
        f"the {gap.metric.removesuffix('_unavailable_s').replace('_', ' ')} gap "
        f"{gap.start_s:.1f}-{gap.end_s:.1f} s"
        for gap in metrics.probe_stalled_gaps
        # The gaps this stall overlaps (others may overlap shorter stalls only).
        if gap.start_s < stall.at_s + stall.seconds and stall.at_s < gap.end_s
    ]
    if not gaps:
        return line + "no availability gap overlaps it"
    if len(gaps) == 1:
        return line + f"{gaps[0]} overlaps it: it may be this machine's, not the cluster's"
    listed = ", ".join(gaps[:-1]) + f" and {gaps[-1]}"
    return line + f"{listed} overlap it: they may be this machine's, not the cluster's"


def ha_restart_line(fault: FaultResult) -> str | None:
    """A host restarted as HA would, in one line: its phases as measured (None for any other
    fault). `host-kill on h:p: detection 15 s + boot 60.2 s + member start 0.8 s = back 76 s
    after the failure (HA model: detect 15 s, boot 60 s)`."""
    ha = fault.detail.get("ha")
    if not isinstance(ha, dict):
        return None
    model = ha.get("model") or {}
    boot = model.get("boot_s")
    modelled = f"detect {fmt_number(model.get('detect_s'), 's')}, " + (
        f"boot {fmt_number(boot, 's')}" if boot is not None else "the VM boots by itself"
    )
    phases = " + ".join(f"{name} {fmt_number(ha.get(key), 's')}" for name, key in
                        (("detection", "detect_s"), ("boot", "boot_s"),
                         ("member start", "member_start_s")))  # fmt: skip
    return (
        f"{fault.kind} on {fault.target}: {phases} = back "
        f"{fmt_number(ha.get('back_s'), 's')} after the failure (HA model: {modelled})"
    )


def recovery_lines(result: Result) -> list[str]:
    """`recovery:` as operations teams read it: the write outage of a lost majority in its
    parts (waiting for the runbook, then the forced reconfig and the election), then each lost
    member's way back; none when the experiment carried no recovery."""
    done = result.recovery
    if done is None:
        return []
    lines = []
    if done.forced_at_s is not None:
        lines.append(
            f"recovery: majority lost at {fmt_number(done.loss_at_s, 's')}; forced reconfig "
            f"at {fmt_number(done.forced_at_s, 's')} on {done.sent_to} (kept "
            f"{', '.join(done.survivors)}; config version {done.version})"
        )
    rto = done.rto
    if rto.rto_s is not None:
        lines.append(
            f"  writes back {fmt_number(rto.rto_s, 's')} after the loss = "
            f"{fmt_number(rto.detection_s, 's')} until a write failed + "
            f"{fmt_number(rto.decision_s, 's')} to the forced reconfig + "
            f"{fmt_number(rto.election_s, 's')} to a primary + "
            f"{fmt_number(rto.client_s, 's')} to the clients' first write"
        )
    for r in done.re_added:
        lines.append(
            f"  {r.host} added back at {fmt_number(r.added_at_s, 's')}, SECONDARY at "
            f"{fmt_number(r.secondary_at_s, 's')}, its vote back at "
            f"{fmt_number(r.restored_at_s, 's')}"
        )
    if done.error:
        lines.append(f"  recovery error: {done.error}")
    return lines


def audit_lines(result: Result) -> list[str]:
    """The data audit in a line, a line per divergent member and collection, then a line per
    member that rolled back (none when the experiment did not ask for the audit)."""
    audit = result.audit
    if audit is None:
        return []
    return (_comparison_lines(audit) + _oplog_lines(audit) + _validate_lines(audit)
            + _rollback_lines(audit))  # fmt: skip


def _comparison_lines(audit: AuditResult) -> list[str]:
    if audit.error is not None:
        return [f"audit: not compared: {audit.error}"]
    if not audit.caught_up:
        return [f"audit: not compared: the members had not applied the primary's last write "
                f"within {fmt_number(audit.lag_s)} s"]  # fmt: skip
    compared = f"{len(audit.members)} members, {', '.join(audit.databases) or 'no database'}"
    if audit.consistent:
        return [f"audit: consistent: {compared} (caught up in {fmt_number(audit.lag_s)} s)"]
    if not audit.divergences:
        return [f"audit: same data on {compared}, but not consistent (below)"]
    return [f"audit: DIVERGENT: {compared}"] + [
        f"  {d.member} {d.database}.{d.collection} (_id {', '.join(d.ids) or 'none listed'}"
        + (f"; {d.member_count} documents, the primary {d.primary_count}"
           if d.member_count != d.primary_count else "") + ")"
        for d in audit.divergences
    ]  # fmt: skip


def _oplog_lines(audit: AuditResult) -> list[str]:
    if audit.oplog_error:
        return [f"oplog: not compared: {audit.oplog_error}"]
    if audit.oplog_compared is None:
        return []
    if not audit.oplog_differences:
        return [f"oplog: the newest {audit.oplog_compared} entries the same on every member"]
    return [f"oplog: DIFFERS: {o.member} {o.ts} (term {o.term}): {o.reason}"
            for o in audit.oplog_differences]  # fmt: skip


def _validate_lines(audit: AuditResult) -> list[str]:
    if audit.validate_error:
        return [f"validate: not run everywhere: {audit.validate_error}"]
    if audit.validated is None:
        return []
    if not audit.invalid:
        return [f"validate: {audit.validated} collections valid on every member"]
    return [f"validate: NOT VALID: {i.member} {i.database}.{i.collection}: "
            f"{'; '.join(i.errors) or 'no error given'}" for i in audit.invalid]  # fmt: skip


def _rollback_lines(audit: AuditResult) -> list[str]:
    if not audit.rollbacks_accounted:
        return []
    if not audit.rollbacks:
        return ["rollbacks: none"]
    lines = []
    for r in audit.rollbacks:
        times = "rolled back" if r.rollbacks is None else f"rolled back {r.rollbacks}x"
        if not r.readable:
            lines.append(f"rollbacks: {r.member} {times}; its rollback files are not readable "
                         "from here (what they took is not known)")  # fmt: skip
            continue
        took = ", ".join(f"{n} from {ns}" for ns, n in sorted(r.namespaces.items())) or "nothing"
        lines.append(f"rollbacks: {r.member} {times}, took {took}")
        lines += [f"  ACKNOWLEDGED {w.write_concern} writes of probe {w.probe}: "
                  f"{len(w.seqs)} (seq {_seq_sample(w.seqs)})" for w in r.acknowledged]  # fmt: skip
    return lines


def _seq_sample(seqs: list[int], limit: int = 10) -> str:
    shown = ", ".join(map(str, seqs[:limit]))
    return shown + (f", ... {len(seqs) - limit} more" if len(seqs) > limit else "")
