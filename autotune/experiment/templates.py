"""The grammar of a metric query template: ``{{name}}`` placeholders, and the names autotune
fills in. Here, below both the experiment's checks (an unknown placeholder is refused) and the
metric sources that fill them (autotune.metrics.promql)."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
KNOWN_PLACEHOLDERS = frozenset({"selector", "load_selector", "window"})


def placeholders(template: str) -> set[str]:
    """The placeholder names a template uses."""
    return {m.group(1) for m in PLACEHOLDER.finditer(template)}
