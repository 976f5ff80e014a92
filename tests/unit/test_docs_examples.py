"""Every experiment shown in README.md validates: an example a user copies must run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.experiment import parse_experiment

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _experiments() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for i, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", doc.read_text(), re.S)):
            # an experiment, not a fragment (a Kubernetes manifest, a `target:` snippet)
            if re.search(r"^name:", block, re.M) and re.search(r"^target:", block, re.M):
                found.append((f"{doc.relative_to(ROOT)}#{i}", block))
    return found


def test_the_docs_show_at_least_one_experiment() -> None:
    assert _experiments()


@pytest.mark.parametrize(("where", "text"), _experiments(), ids=[w for w, _ in _experiments()])
def test_every_experiment_shown_validates(where: str, text: str) -> None:
    parse_experiment(text)
