"""One located problem of a file rsdrill reads: `FILE:LINE:COL: field: problem`."""

from __future__ import annotations

from rsdrill.errors import RsdrillError

Loc = tuple[str | int, ...]
"""Where in a document: its keys and list indexes, outermost first."""


class ExperimentError(RsdrillError):
    """An experiment file that cannot be used, located at one line and column (1-based).

    `str(err)` is `"{path}:{line}:{col}: {field}: {problem}"`, or without `{field}: ` when the
    problem is not about one field (an unreadable file, a YAML syntax error).
    """

    def __init__(
        self, path: str, line: int, col: int, problem: str, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.col = col
        self.field = field
        self.problem = problem
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}:{self.col}"
        return (
            f"{where}: {self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"
        )


def line_col(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of `text[index]`."""
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1
