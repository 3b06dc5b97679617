"""`rsdrill audit URI`: do the members hold the same data?"""

from typing import Annotated

import typer

from rsdrill.cli.errors import JsonOption, exit_invalid, json_errors

EXIT_DIVERGENT = 1


@json_errors
def audit(
    uri: Annotated[str, typer.Argument(help="The replica set's connection string.", metavar="URI")],
    database: Annotated[
        list[str] | None,
        typer.Option(
            "--db",
            help="A database to compare (repeatable; default: every one "
            "but admin, config and local).",
        ),
    ] = None,
    catch_up: Annotated[
        float,
        typer.Option(
            "--catch-up",
            min=0,
            help="Seconds to wait for every member to apply the primary's last write.",
        ),
    ] = 30.0,
    as_json: JsonOption = False,
) -> None:
    """Compare the members' data once each has applied the primary's last write (dbHash of
    each database, then which documents differ; validate of each collection on each member).
    Exit 0: the same everywhere and valid; 1: a member differs, has a collection that is not
    valid, or did not catch up; 2: a member could not be compared (nothing is then said to be
    consistent)."""
    from rsdrill.connection import SettingsError, parse_uri
    from rsdrill.engine.audit import AuditError, to_result
    from rsdrill.engine.audit import audit as run_audit
    from rsdrill.redact import redact_uri

    try:
        parsed = parse_uri(uri)
        report = run_audit(parsed.seeds, parsed.options, databases=database, catch_up_s=catch_up)
    except (SettingsError, AuditError) as exc:
        exit_invalid(f"audit {redact_uri(uri)}: {redact_uri(str(exc))}")
    if as_json:  # as a run's result.json carries it
        typer.echo(to_result(report).model_dump_json(indent=2))
    else:
        databases = ", ".join(report.databases)
        compared = f"{len(report.members)} members, " + (
            f"databases {databases}" if databases else "no user database on any of them"
        )
        if not report.caught_up:
            typer.echo(f"not caught up: the members had not applied the primary's last write "
                       f"within {report.lag_s:.1f}s; nothing compared ({compared})")  # fmt: skip
        for d in report.divergences:
            ids = ", ".join(repr(i) for i in d.ids) or "none listed"
            typer.echo(f"divergent: {d.member} {d.database}.{d.collection} (_id {ids})")
        for o in report.oplog_differences:
            typer.echo(f"oplog differs: {o.member} {o.ts} (term {o.term}): {o.reason}")
        if report.oplog_error:
            typer.echo(f"oplog not compared: {redact_uri(report.oplog_error)}")
        for i in report.invalid:
            typer.echo(f"not valid: {i.member} {i.database}.{i.collection} "
                       f"({'; '.join(i.errors) or 'no error given'})")  # fmt: skip
        if report.validate_error:
            typer.echo(f"validate not run everywhere: {redact_uri(report.validate_error)}")
        if report.consistent:
            typer.echo(f"consistent: {compared}, same dbHash as the primary {report.primary}"
                       + (f", {report.validated} collections valid"
                          if report.validated is not None else ""))  # fmt: skip
    raise typer.Exit(0 if report.consistent else EXIT_DIVERGENT)
