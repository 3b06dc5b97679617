"""The fault tables: the README's, docs/faults.md and `rsdrill faults` (text and JSON), all
generated from the kinds' specs and the registered platforms' ways (tests fail when the files
differ)."""

from __future__ import annotations

from typing import Any

from rsdrill.experiment.catalog import columns, ways_of
from rsdrill.faults import KINDS, own_fields
from rsdrill.faults.spec import MARKS, OPT_IN, Way


def _cell(ways: tuple[Way, ...]) -> str:
    if not ways:
        return "refused when loaded"
    return "; ".join(f"{way.how}{MARKS[way.support]}" for way in ways)


def fault_table() -> str:
    """The README's table of kinds: what each does and its own fields (Markdown)."""
    lines = ["| kind | what it does | its own fields |", "|---|---|---|"]
    lines += [f"| `{s.kind}` | {s.meaning} | {s.fields_doc} |" for s in KINDS.values()]
    return "\n".join(lines) + "\n"


def support_table() -> str:
    """The README's fault-by-platform table: what each platform really does (Markdown)."""
    found = columns()
    head = " | ".join(platform.title for platform in found.values())
    lines = [f"| fault | {head} |", "|---" * (len(found) + 1) + "|"]
    for spec in KINDS.values():
        cells = " | ".join(_cell(ways_of(spec.kind, column)) for column in found)
        lines.append(f"| `{spec.kind}` | {cells} |")
    return "\n".join(lines) + "\n"


def platform_table(platform: str) -> str:
    """One platform's ways, one row each: kind, engine, when, what is done, support and the
    privileges it needs (Markdown)."""
    lines = ["| fault | engine | when | what is done | support | privileges |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for spec in KINDS.values():
        ways = ways_of(spec.kind, platform)
        if not ways:
            lines.append(f"| `{spec.kind}` | | | refused when loaded | | |")
        for way in ways:
            opt_in = f" (`{OPT_IN[way.support]}: true`)" if way.support in OPT_IN else ""
            needs = "; ".join(f"`{p}`" for p in way.privileges)
            when = way.when.words if way.when is not None else ""
            lines.append(f"| `{spec.kind}` | {way.engine or ''} | {when} | "
                         f"{way.how} | {way.support}{opt_in} | {needs} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def faults_json(platform: str | None = None) -> dict[str, Any]:
    """Every kind with its fields and, per platform (or only `platform`), its ways."""
    shown = [platform] if platform else list(columns())
    return {
        "kinds": [
            {
                "kind": spec.kind,
                "meaning": spec.meaning,
                "fields": list(own_fields(spec.kind)),
                "needs_duration": spec.needs_duration,
                "platforms": {
                    column: [
                        {"how": w.how, "support": w.support, "engine": w.engine,
                         "when": w.when.words if w.when is not None else None,
                         "opt_in": OPT_IN.get(w.support), "privileges": list(w.privileges)}
                        for w in ways_of(spec.kind, column)
                    ]
                    for column in shown
                },
            }
            for spec in KINDS.values()
        ]
    }  # fmt: skip


FAULTS_DOC_HEAD = """# Fault kinds and what each platform really does

Generated from the kinds in `rsdrill/faults/` and the platforms' ways (`rsdrill faults` prints
the same; a test fails when this file differs: regenerate it with
`python -m rsdrill.experiment.faultdocs > docs/faults.md`).

A way marked *approx.* does something close to the fault, not the fault itself: it runs only
when the fault says `approximate: true`, and result.json records `"approximation"` on that
fault. A way marked *one-way* cannot be undone within the run: it runs only with
`one_way: true`, and `rsdrill plan` and `rsdrill check` mark it. Which way a fault takes
follows from its platform, its `engine` and the options in the "when" column.

The "privileges" column of each platform's table is what the identity rsdrill runs as needs to
inject and revert that way (`rsdrill faults --platform P` prints it too): Kubernetes RBAC
(`verbs resource[/subresource][.group]`, in the target's namespace unless marked
cluster-wide; every run also gets its pods, and lists them with a `selector`), AWS IAM actions
(every run also describes instances and volumes), vSphere privileges (every run also needs
System.View and System.Read). The Kubernetes preflight and the Role `rsdrill schedule render`
writes, and the IAM actions and vSphere privileges `rsdrill plan` lists, are read from it.
"""


def faults_doc() -> str:
    """docs/faults.md: both tables and one table per platform (Markdown)."""
    parts = [FAULTS_DOC_HEAD, "## Kinds\n", fault_table(), "## Fault by platform\n",
             support_table()]  # fmt: skip
    for column, platform in columns().items():
        parts += [f"## {platform.title}\n", platform_table(column)]
    return "\n".join(parts)


if __name__ == "__main__":
    print(faults_doc(), end="")
