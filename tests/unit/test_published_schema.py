"""The experiment JSON Schema editors use is published in the repository and named at the top
of every catalog file, so VS Code's YAML extension (and other yaml-language-server editors)
completes and checks them; it is the one the code generates."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from rsdrill.cli.experiment import experiment_json_schema

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "rsdrill-experiment.schema.json"
CATALOG = sorted((ROOT / "experiments").rglob("*.yaml"))


def test_the_published_schema_is_the_generated_one() -> None:
    assert json.loads(PUBLISHED.read_text()) == experiment_json_schema(), (
        "regenerate it: rsdrill schema --out docs/rsdrill-experiment.schema.json"
    )


@pytest.fixture(scope="module")
def published() -> jsonschema.protocols.Validator:
    """The published schema's validator, the schema itself checked once (jsonschema.validate
    checked it for every file: a second each)."""
    schema = json.loads(PUBLISHED.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.name)
def test_every_catalog_file_names_the_schema_and_meets_it(
    path: Path, published: jsonschema.protocols.Validator
) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema="), first
    named = (path.parent / first.split("$schema=", 1)[1]).resolve()
    assert named == PUBLISHED
    document = yaml.safe_load(path.read_text())
    published.validate(document)
