"""The field reference: every field of the experiment file is described, and docs/reference.md is
what the generator writes today (a model changed without regenerating it fails here)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import BaseModel

from autotune.cli import main
from autotune.experiment import models
from autotune.experiment.reference import COMMAND, DOCUMENT, markdown, sections, undescribed

ROOT = Path(__file__).parents[2]


def test_every_field_has_a_description() -> None:
    missing = undescribed()
    assert not missing, ("fields without a description (give each a Field(description=...) in "
                         f"autotune/experiment/models.py): {', '.join(missing)}")


def test_every_model_is_in_the_reference() -> None:
    """A model the walk does not reach would escape the description check above."""
    defined = {cls for _, cls in inspect.getmembers(models, inspect.isclass)
               if issubclass(cls, BaseModel) and cls.__module__ == models.__name__
               and cls.model_fields}
    reached = {section.model for section in sections()}
    assert defined <= reached, f"not reached from Experiment: {defined - reached}"


def test_docs_reference_is_generated_from_the_models() -> None:
    written = (ROOT / DOCUMENT).read_text()
    assert written == markdown(), (f"{DOCUMENT} is not what the models generate: regenerate it "
                                   f"with `{COMMAND} > {DOCUMENT}`")


def test_rows_give_path_type_default_and_constraints() -> None:
    rows = {row.path: row for section in sections() for row in section.rows}
    rate = rows["target.local.load.rate"]
    assert (rate.type, rate.default, rate.constraints) == ("number or `auto`", "`400`",
                                                          "> 0, <= 50000")
    assert rows["parameters[].name"].default == "required"
    assert rows["metrics.<name>.query"].type == "string"
    assert rows["objective.minimize"].description
    window = rows["measure.window"]
    assert (window.type, window.default) == ("duration", "`1m`")
    assert rows["study.heartbeat"].constraints == "> 0"
    assert rows["target.kubernetes.load.image"].constraints == "not empty"
    titles = [section.paths for section in sections()]
    for kind in ("local", "kubernetes", "simulated"):
        assert (f"target.{kind}",) in titles  # each member of the target union has a section
    assert ("objective", "objective[]") in titles


def test_markdown_keeps_tables_and_placeholders_intact() -> None:
    text = markdown()
    # a '|' inside a pattern would end the cell; '<name>' unescaped would be an HTML tag
    assert "(m\\|k\\|M" in text
    assert "results/\\<name>/" in text
    for line in text.splitlines():
        if line.startswith("| `"):
            assert line.replace("\\|", "").count("|") == 6, line


def test_schema_command_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == markdown()
