"""Read an experiment file into its models, or raise an ``ExperimentError`` with all problems."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

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


# A pydantic error location is a walk through the models: a field name inside a model, an index
# inside a tuple, a key inside a dict (then "[key]" when the key itself is wrong) and, inside a
# union of several types, the name of the member that was tried ("int", "Goal",
# "tuple[Goal, ...]", "literal['auto']"). Spelling cannot tell a member name from a key (a
# parameter may be called "int"), so the location is walked along the models' own types: only
# a part that stands where a union is gets dropped as a member name.
_UNKNOWN: Any = object()  # a type the walk cannot follow: the rest of the location is kept as is


def _locate(loc: tuple[int | str, ...], root: type[BaseModel]) -> tuple[str, bool]:
    """The path of an error location, and whether the error is about a mapping key itself."""
    out = ""
    tp: Any = root
    i = 0
    while i < len(loc):
        part = loc[i]
        i += 1
        members = _members(tp)
        if len(members) > 1:  # this part names the union member that was tried
            tp = _member(members, str(part))
            continue
        tp = members[0] if members else _UNKNOWN
        origin = get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = _fields(tp).get(str(part))
            tp = field.annotation if field is not None else _UNKNOWN
        elif origin is dict:
            if i == len(loc) - 1 and loc[i] == "[key]":
                return _join(out, part), True
            tp = get_args(tp)[1]
        elif origin in (tuple, list) and isinstance(part, int):
            args = [a for a in get_args(tp) if a is not Ellipsis]
            tp = args[0] if origin is list or len(args) == 1 else (
                args[part] if part < len(args) else _UNKNOWN)
            out += f"[{part}]"
            continue
        else:
            tp = _UNKNOWN
            if isinstance(part, int):
                out += f"[{part}]"
                continue
        out = _join(out, part)
    return out or "(top level)", False


def _join(out: str, part: int | str) -> str:
    return f"{out}.{part}" if out else str(part)


def _members(tp: Any) -> list[Any]:
    """The types a value at ``tp`` may have: the members of a union (less None), or ``tp``."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, UnionType):
        return [m for arg in get_args(tp) if arg is not NoneType for m in _members(arg)]
    return [] if tp is _UNKNOWN else [tp]


def _member(members: list[Any], tag: str) -> Any:
    """The member of a union that pydantic names ``tag`` (_UNKNOWN if none matches)."""
    base = tag.split("[", 1)[0].removeprefix("constrained-")
    for member in members:
        if isinstance(member, type) and issubclass(member, BaseModel):
            name = member.__name__
        else:
            origin = get_origin(member) or member
            name = "literal" if origin is Literal else getattr(origin, "__name__", "")
        if name == base:
            return member
    return _UNKNOWN


@cache
def _fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {f.alias or name: f for name, f in model.model_fields.items()}


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
        path, is_key = _locate(err["loc"], Experiment)
        message = _message(err)
        if is_key:
            message = (f"a key must be text (got {err['input']!r}; quote it)"
                       if err["type"] == "string_type" else f"key: {message}")
        by_path.setdefault(path, []).append(message)
    lines = []
    for path, messages in by_path.items():
        unique = list(dict.fromkeys(messages))
        # A value that fits no member of a union yields one message per member: keep it short.
        lines.append(f"{path}: {unique[0]}" if len(unique) == 1
                     else f"{path}: {' / '.join(unique[:3])}")
    return lines
