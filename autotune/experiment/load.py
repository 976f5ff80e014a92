"""Read an experiment file into its models, or raise an ``ExperimentError`` with all problems."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import ExperimentError
from autotune.experiment.checks import check
from autotune.experiment.models import Experiment


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of duplicated keys silently; a tuning run must not guess."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise ExperimentError(
                [f"line {mark.line + 1}, column {mark.column + 1}: duplicate key {key!r}"]
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def file_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_experiment(path: str | Path) -> tuple[Experiment, str]:
    """Return the experiment and the hash of the file's text (recorded in every trial)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ExperimentError([f"cannot read the file: {e.strerror or e}"], str(path)) from None
    except UnicodeDecodeError:
        raise ExperimentError(["not a UTF-8 text file"], str(path)) from None
    try:
        return parse_experiment(text), file_hash(text)
    except ExperimentError as e:
        raise ExperimentError(e.problems, str(path)) from None


def parse_experiment(text: str) -> Experiment:
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ExperimentError([f"{where}YAML syntax error: {e.problem}"]) from None
    except yaml.YAMLError as e:
        raise ExperimentError([f"YAML error: {e}"]) from None
    if raw is None:
        raise ExperimentError(["the file is empty (expected a mapping with name, target, ...)"])
    if not isinstance(raw, dict):
        raise ExperimentError(
            [f"the file must be a mapping (name: ..., target: ...), not a {type(raw).__name__}"]
        )
    try:
        exp = Experiment.model_validate(raw)
    except ValidationError as e:
        raise ExperimentError(format_validation_error(e)) from None
    problems = check(exp)
    if problems:
        raise ExperimentError(problems)
    return exp


_TYPE_NAMES = {"int", "float", "str", "bool", "none", "literal", "dict", "list", "tuple"}


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        # Pydantic puts the tried union member into the location ("int", "Goal", "tuple[...]").
        base = part.split("[", 1)[0].lower()
        if base in _TYPE_NAMES or base.startswith("function-") or part[:1].isupper():
            continue
        out += f".{part}" if out else part
    return out or "(top level)"


def _message(err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
              "less_than": "<"}[kind]
        bound = next(iter(ctx.values()))
        return f"must be {op} {bound}"
    if kind == "string_pattern_mismatch":
        return f"{err['input']!r} does not match {ctx.get('pattern')}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if kind == "literal_error":
        return f"{err['input']!r} is not one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg'].lower()} (got {err['input']!r})" if "input" in err else err["msg"]


def format_validation_error(e: ValidationError) -> list[str]:
    by_path: dict[str, list[str]] = {}
    for err in e.errors():
        by_path.setdefault(_path(err["loc"]), []).append(_message(err))
    lines = []
    for path, messages in by_path.items():
        unique = list(dict.fromkeys(messages))
        # A value that fits no member of a union yields one message per member: keep it short.
        lines.append(f"{path}: {unique[0]}" if len(unique) == 1
                     else f"{path}: {' / '.join(unique[:3])}")
    return lines
