"""PromQL templating: fill ``{{selector}}``, ``{{load_selector}}`` and ``{{window}}`` safely.
Pure functions."""

from __future__ import annotations

import re
from collections.abc import Mapping

from autotune.experiment.templates import PLACEHOLDER
from autotune.live import Live, Matcher

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RE2 metacharacters; pod names never contain them, but label values from users might.
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def quote(value: str) -> str:
    """A PromQL double-quoted string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def any_of(values: list[str]) -> str:
    """A regex matching exactly one of the values (for ``=~``)."""
    return "|".join(_RE2_SPECIAL.sub(r"\\\1", v) for v in sorted(values))


def render_selector(matchers: tuple[Matcher, ...]) -> str:
    parts = []
    for m in matchers:
        if not _LABEL_NAME.match(m.label):
            raise ValueError(f"invalid label name {m.label!r}")
        parts.append(f"{m.label}{'=~' if m.regex else '='}{quote(m.value)}")
    return ",".join(parts)


def values(live: Live, seconds: float) -> dict[str, str]:
    """What fills the placeholders of a query for ``live`` over a window of ``seconds``."""
    return {"selector": render_selector(live.scope),
            "load_selector": render_selector(live.load_scope or live.scope),
            "window": render_window(seconds)}


def render_window(seconds: float) -> str:
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def render(template: str, values: Mapping[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"unknown placeholder {{{{{name}}}}}")
        return values[name]

    return PLACEHOLDER.sub(fill, template)
