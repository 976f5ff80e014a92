"""A Markdown reference of every field of an experiment file, generated from the models.

``autotune schema --format markdown`` prints it and docs/reference.md is that output; a test keeps
the two equal, so the reference cannot describe a field the models lack, nor miss one. Nothing
here is written by hand but the page's preamble: types, defaults and constraints are read from
the pydantic fields, descriptions from their ``description`` (and each model's docstring).

One section per model, in the order a file is read (depth first); one row per field, named by
its dotted path: ``target.local.load.rate``; ``parameters[].name`` for the items of a list;
``metrics.<name>.query`` for the values of a mapping. A union of models (``target``'s local,
kubernetes and simulated) gives each member its own section.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from autotune.experiment.durations import parse_duration
from autotune.experiment.models import Experiment

COMMAND = "autotune schema --format markdown"
"""The command that prints the reference (and regenerates docs/reference.md)."""

DOCUMENT = "docs/reference.md"


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    constraints: str
    description: str


@dataclass(frozen=True)
class Section:
    paths: tuple[str, ...]
    """Where the model sits in a file: ``("",)`` for the top level; more than one where one
    field takes the model alone or in a list (``objective``, ``objective[]``)."""
    model: type[BaseModel]
    rows: tuple[Row, ...]


def sections(root: type[BaseModel] = Experiment) -> list[Section]:
    """Every model reachable from ``root``, each once, parents before their children."""
    out: list[Section] = []

    def visit(model: type[BaseModel], paths: tuple[str, ...],
              seen: frozenset[type[BaseModel]]) -> None:
        rows = []
        children: dict[type[BaseModel], list[str]] = {}
        for name, field in model.model_fields.items():
            path = _join(paths[0], field.alias or name)
            rows.append(Row(path, _type(field.annotation, field.metadata), _default(field),
                            _constraints(field), field.description or ""))
            for member, suffix in _models_in(field.annotation):
                children.setdefault(member, []).append(path + suffix)
        out.append(Section(paths, model, tuple(rows)))
        for member, member_paths in children.items():
            if member not in seen:  # a model that contains itself would recurse forever
                visit(member, tuple(member_paths), seen | {member})

    visit(root, ("",), frozenset({root}))
    return out


def undescribed(root: type[BaseModel] = Experiment) -> list[str]:
    """The paths of the fields without a description."""
    return [row.path for section in sections(root) for row in section.rows
            if not row.description.strip()]


def markdown(root: type[BaseModel] = Experiment) -> str:
    """The reference page, as ``autotune schema --format markdown`` prints it."""
    lines = [
        "# Experiment file reference",
        "",
        f"Generated from autotune/experiment/models.py by `{COMMAND}`: do not edit it by hand; "
        f"regenerate it with `{COMMAND} > {DOCUMENT}`.",
        "",
        "Every field of an experiment file, one table per section. A path such as "
        "`parameters[].name` is the key `name` of each item of the list `parameters`; "
        "`metrics.<name>.query` is the key `query` of each value of the mapping `metrics`. "
        "Keys not listed here are refused. *duration*: seconds as a number, or text such as "
        "`500ms`, `15s`, `1m30s`, `2h` (from 0 to 365d). `autotune schema` prints the same "
        "fields as a JSON Schema, for editors; `autotune validate FILE` checks a file, including "
        "the rules between fields that the constraints below do not show.",
    ]
    for section in sections(root):
        title = ", ".join(f"`{p}`" for p in section.paths) if section.paths[0] else "Top level"
        lines += ["", f"## {title}", ""]
        intro = _plain(_docstring(section.model))
        if intro:
            lines += [intro, ""]
        lines += ["| Field | Type | Default | Constraints | Description |",
                  "| --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(_cell(c) for c in (
            f"`{row.path}`", row.type, row.default, row.constraints, row.description)) + " |"
            for row in section.rows]
    return "\n".join(lines) + "\n"


# --- reading the annotations -----------------------------------------------------------------

def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unwrap(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """``Annotated[T, *metadata]`` as ``(T, metadata)``; anything else with no metadata."""
    metadata: tuple[Any, ...] = ()
    while get_origin(tp) is Annotated:
        tp, *more = get_args(tp)
        metadata += tuple(more)
    return tp, metadata


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, UnionType)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _items(tp: Any) -> tuple[str, Any] | None:
    """A list's or mapping's path suffix and item type; None for anything else."""
    origin = get_origin(tp)
    if origin in (tuple, list):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return ("[]", args[0]) if len(args) == 1 else None
    if origin is dict:
        return ".<name>", get_args(tp)[1]
    return None


def _models_in(tp: Any, suffix: str = "") -> list[tuple[type[BaseModel], str]]:
    """The models a value of type ``tp`` may hold, each with its path suffix."""
    tp, _ = _unwrap(tp)
    if _is_union(tp):
        return [found for arg in get_args(tp) for found in _models_in(arg, suffix)]
    if _is_model(tp):
        return [(tp, suffix)]
    items = _items(tp)
    return _models_in(items[1], suffix + items[0]) if items is not None else []


def _is_duration(metadata: Iterable[Any]) -> bool:
    # models.Duration is a float parsed by parse_duration: the only way to know it is by that.
    return any(getattr(m, "func", None) is parse_duration for m in metadata)


_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", NoneType: "null"}


def _type(tp: Any, metadata: Iterable[Any] = ()) -> str:
    inner, own = _unwrap(tp)
    if _is_duration((*metadata, *own)):
        return "duration"
    if _is_union(inner):
        names = [_type(arg) for arg in get_args(inner)]
        if "number" in names:  # an integer is a number: "integer or number" says nothing more
            names = [n for n in names if n != "integer"]
        return " or ".join(dict.fromkeys(names))
    if get_origin(inner) is Literal:
        values = [f"`{_text(v)}`" for v in get_args(inner)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if _is_model(inner):
        return "object"
    items = _items(inner)
    if items is not None:
        item = _type(items[1])
        item = f"({item})" if " or " in item else item
        return f"list of {item}" if items[0] == "[]" else f"map of name to {item}"
    return _NAMES.get(inner, getattr(inner, "__name__", str(inner)))


def _constraint_metadata(field: FieldInfo) -> list[Any]:
    """The field's own constraints and those inside its union's members (``rate``'s number)."""
    found = list(field.metadata)
    tp = field.annotation
    members = get_args(tp) if _is_union(tp) else (tp,)
    for member in members:
        for m in _unwrap(member)[1]:
            found += m.metadata if isinstance(m, FieldInfo) else [m]
    return found


def _text_like(tp: Any) -> bool:
    """A text, or a text or null (``str | None``: review finding, its length read "items")."""
    tp = _unwrap(tp)[0]
    if _is_union(tp):
        kinds = [_unwrap(a)[0] for a in get_args(tp) if a is not type(None)]
        return bool(kinds) and all(k is str for k in kinds)
    return tp is str


def _constraints(field: FieldInfo) -> str:
    text_like = _text_like(field.annotation)
    out = []
    for m in _constraint_metadata(field):
        if isinstance(m, at.Gt):
            out.append(f"> {_number(m.gt)}")
        elif isinstance(m, at.Ge):
            out.append(f">= {_number(m.ge)}")
        elif isinstance(m, at.Lt):
            out.append(f"< {_number(m.lt)}")
        elif isinstance(m, at.Le):
            out.append(f"<= {_number(m.le)}")
        elif isinstance(m, at.MinLen):
            n = m.min_length
            out.append(("not empty" if n == 1 else f"at least {n} characters") if text_like
                       else f"at least {n} item{'s' if n != 1 else ''}")
        elif isinstance(m, at.MaxLen):
            out.append(f"at most {m.max_length} {'characters' if text_like else 'items'}")
        elif getattr(m, "pattern", None) is not None:
            out.append(f"pattern `{m.pattern}`")
    return ", ".join(out)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.get_default(call_default_factory=True, validated_data={})
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "its fields' defaults"
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and _is_duration((*field.metadata, *_unwrap(field.annotation)[1])):
        return f"`{_duration(float(value))}`"
    return f"`{_text(value)}`"


def _text(value: Any) -> str:
    """A value as it is written in a YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


def _number(value: object) -> str:
    """A bound or a default as it is written: 1e6 as 1000000, 400.0 as 400."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


def _duration(seconds: float) -> str:
    """Seconds as the shortest duration text that means them: 300 -> 5m, 0.1 -> 100ms."""
    if not math.isfinite(seconds):
        return _number(seconds)
    millis = round(seconds * 1000)
    parts = []
    for unit, size in _UNITS:
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


# --- writing Markdown ------------------------------------------------------------------------

def _docstring(model: type[BaseModel]) -> str:
    """The model's own docstring (not an inherited one) as Markdown paragraphs."""
    doc = model.__dict__.get("__doc__")
    if not doc:
        return ""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    # reStructuredText literals (``x``) are Markdown code spans (`x`).
    return "\n\n".join(" ".join(p.split()).replace("``", "`") for p in paragraphs)


def _cell(text: str) -> str:
    """Text fit for a table cell: on one line, a '|' escaped (GitHub honours it in code too)."""
    return _plain(" ".join(text.split())).replace("|", "\\|")


def _plain(text: str) -> str:
    """``<`` escaped outside code spans: Markdown would take ``results/<name>/`` for an HTML
    tag and show ``results//`` (inside a code span a backslash would show, and is not needed)."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "\\<") for i, part in enumerate(parts))
