"""Read an experiment file into an `Experiment`, or fail with one `FILE:LINE:COL` error.

The YAML is composed into nodes (which keep their start marks) and built into plain Python
values by hand, so that every pydantic error can be traced back to the key or value that caused
it. Along the way: `${VAR}` substitution in string values, duplicate keys rejected, and unknown
names answered with a did-you-mean. Top-level keys starting with `x-` are ignored, as in Compose
files, so that anchors can be defined there. When a file has several problems, the first one in
the file is reported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rsdrill.experiment.located import _validation_issues
from rsdrill.experiment.problem import ExperimentError, line_col
from rsdrill.experiment.schema import FROM_FILE, Experiment
from rsdrill.experiment.yamltree import _Tree

# The document a file holds: an experiment, or another file format built from the same parts
# (a timeline); each gets the same located errors.
Model = TypeVar("Model", bound=BaseModel)

EXTENSION_PREFIX = "x-"


def load_experiment(path: Path, env: Mapping[str, str] | None = None) -> Experiment:
    """Read and validate the experiment file at `path`.

    `env` supplies `${VAR}` values (default: the process environment). Raises ExperimentError.
    """
    return load_document(Experiment, path, env)


def load_experiment_text(
    text: str | bytes, source_name: str = "<text>", env: Mapping[str, str] | None = None
) -> Experiment:
    """Validate an experiment given as text (bytes are decoded as UTF-8); see `load_experiment`.

    `source_name` is the path that error messages name. Raises ExperimentError.
    """
    return load_document_text(Experiment, text, source_name, env)


def check_experiment_file(
    path: Path, env: Mapping[str, str] | None = None
) -> list[ExperimentError]:
    """Check the experiment file at `path` without needing its environment: a `${VAR}` left
    unset (no default) is kept as written and its value goes unchecked. Returns one note per
    such value; raises ExperimentError for any other problem, as `load_experiment` would."""
    data = _read(path)
    text = _decode(data, str(path))
    tree = _Tree(text, str(path), os.environ if env is None else env, Experiment,
                 require_env=False)  # fmt: skip
    if tree.issues:
        raise _first(tree.issues)
    unchecked = {(note.line, note.col) for note in tree.unset}
    try:
        Experiment.model_validate(
            {k: v for k, v in tree.data.items() if not _is_extension(k)},
            context={FROM_FILE: True},
        )
    except ValidationError as exc:
        issues = [i for i in _validation_issues(tree, exc) if (i.line, i.col) not in unchecked]
        if issues:
            raise _first(issues) from None
    return tree.unset


def load_document(model: type[Model], path: Path, env: Mapping[str, str] | None = None) -> Model:
    """Read and validate the file at `path` as a `model` document; see `load_experiment`."""
    data = _read(path)
    return load_document_text(model, data, str(path), env)


def load_document_text(
    model: type[Model],
    text: str | bytes,
    source_name: str = "<text>",
    env: Mapping[str, str] | None = None,
) -> Model:
    """Validate `text` as a `model` document, with located errors; see `load_experiment_text`.

    `model` is validated from the file's top-level mapping; its fields are found in the file as
    an experiment's are.
    """
    if isinstance(text, bytes):
        text = _decode(text, source_name)
    tree = _Tree(text, source_name, os.environ if env is None else env, model)
    # A duplicate key or an unset variable explains the schema's complaints, so it goes first.
    if tree.issues:
        raise _first(tree.issues)
    data = {k: v for k, v in tree.data.items() if not _is_extension(k)}
    try:
        return model.model_validate(data, context={FROM_FILE: True})
    except ValidationError as exc:
        raise _first(_validation_issues(tree, exc)) from None


# Far more than any experiment file; a device or a stream without end stops here.
MAX_FILE_BYTES = 16 * 1024 * 1024


def _read(path: Path) -> bytes:
    """The file's bytes (a pipe's too, as `<(...)` gives), at most MAX_FILE_BYTES of them."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ExperimentError(str(path), 1, 1, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ExperimentError(str(path), 1, 1, f"larger than {MAX_FILE_BYTES // 2**20} MiB: "
                              "not an experiment file")  # fmt: skip
    return data


def _is_extension(key: Any) -> bool:
    """Top-level `x-...` keys are the file's own (a place for YAML anchors), not the schema's."""
    return isinstance(key, str) and key.startswith(EXTENSION_PREFIX)


def _first(issues: list[ExperimentError]) -> ExperimentError:
    return min(issues, key=lambda e: (e.line, e.col))


def _decode(data: bytes, source_name: str) -> str:
    if b"\0" in data:
        raise ExperimentError(source_name, 1, 1, "binary data, not a YAML text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        good = data[: exc.start].decode("utf-8-sig")
        line, col = line_col(good, len(good))
        raise ExperimentError(
            source_name, line, col, f"not UTF-8 text (byte 0x{data[exc.start]:02x})"
        ) from None
