"""Read an experiment file into its models, or raise an ``ExperimentError`` with all problems.

Its size (~410 lines) is mostly the messages: walking pydantic's error locations back to the
file's paths and saying what was meant (a near key, the section a key belongs in).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import reprlib
import stat
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from autotune.errors import ExperimentError, ExperimentUnreadable
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
                [f"line {mark.line + 1}, column {mark.column + 1}: duplicate key {_short(key)}"]
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


MAX_FILE_BYTES = 1 << 20
"""An experiment file is a few kilobytes. A larger one is refused before it is parsed: PyYAML's
pure-Python loader needs minutes and gigabytes for tens of megabytes."""

MAX_VALUES = 100_000
"""Values (scalars and collections) a document may stand for, each use of an alias counted in
full: a "billion laughs" file (aliases of aliases) is refused before anything is built from it,
since everything downstream (validation, error messages) walks the expanded values."""

MAX_DEPTH = 50
"""Nesting levels; an experiment needs fewer than ten."""


def file_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_experiment(path: str | Path) -> tuple[Experiment, str]:
    """Return the experiment and the hash of the file's text (recorded in every trial)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            # Never more than the limit: the path may be a huge file, or /dev/zero.
            data = f.read(MAX_FILE_BYTES + 1)
            info = os.fstat(f.fileno())
    except FileNotFoundError:
        raise ExperimentUnreadable(["not found"], str(path)) from None
    except OSError as e:
        raise ExperimentUnreadable([f"cannot read the file: {e.strerror or e}"],
                                   str(path)) from None
    if len(data) > MAX_FILE_BYTES:
        size = f"{info.st_size / 1e6:.1f} MB; " if stat.S_ISREG(info.st_mode) else ""
        raise ExperimentError([f"the file is too large for an experiment file ({size}at most "
                               f"{MAX_FILE_BYTES // 1024} KiB)"], str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ExperimentError(["not a UTF-8 text file"], str(path)) from None
    try:
        return parse_experiment(text), file_hash(text)
    except ExperimentError as e:
        raise ExperimentError(e.problems, str(path)) from None


_INDENTATION_PROBLEMS = ("mapping values are not allowed here", "did not find expected key",
                         "did not find expected '-' indicator",
                         "expected <block end>, but found")


def _yaml_hint(e: yaml.MarkedYAMLError, text: str) -> str:
    """The line PyYAML stopped at, and for the errors an indentation mistake causes, where to
    look: PyYAML reports them where the parse failed, often a line after the mistake."""
    mark = e.problem_mark
    if mark is None:
        return ""
    lines = text.splitlines()
    shown = f"\n    {mark.line + 1} | {lines[mark.line]}" if mark.line < len(lines) else ""
    if any(str(e.problem or "").startswith(p) for p in _INDENTATION_PROBLEMS):
        return (f"{shown}\n    (usually indentation: the keys of one mapping, and the '-' of "
                "one list, start in the same column; check this line and the one before)")
    return shown


def _yaml_context(e: yaml.MarkedYAMLError) -> str:
    """What PyYAML was parsing, and where it began: the cause may be there, many lines before
    the problem (review finding: an unclosed quote on line 1 was reported at line 18 alone)."""
    if not e.context:
        return ""
    mark = e.context_mark
    at = (f" that began at line {mark.line + 1}, column {mark.column + 1}"
          if mark is not None and (e.problem_mark is None or mark.line != e.problem_mark.line)
          else "")
    return f" ({e.context}{at})"


def parse_experiment(text: str) -> Experiment:
    if len(text) > MAX_FILE_BYTES:
        raise ExperimentError([f"the text is too large for an experiment file ({len(text)} "
                               f"characters; at most {MAX_FILE_BYTES // 1024} KiB)"])
    try:
        raw = _load_yaml(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ExperimentError([f"{where}YAML syntax error: {e.problem}{_yaml_context(e)}"
                               f"{_yaml_hint(e, text)}"]) from None
    except yaml.YAMLError as e:
        raise ExperimentError([f"YAML error: {e}"]) from None
    except RecursionError:
        raise ExperimentError([f"the YAML is nested too deeply (at most {MAX_DEPTH} levels)"]) \
            from None
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


def _load_yaml(text: str) -> Any:
    """``yaml.load`` with our loader, refusing a document too large or too deep once its
    aliases are expanded (checked on the composed nodes, where an alias is one shared node)."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, "", {}, set(), 0)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _measure(node: yaml.Node, path: str, sizes: dict[int, int], open_: set[int],
             depth: int) -> int:
    """How many values ``node`` stands for, aliases expanded; raises ``ExperimentError`` naming
    the path of the first node that is too large, too deep or contains itself."""
    key = id(node)
    if key in sizes:
        return sizes[key]

    def refuse(problem: str) -> ExperimentError:
        mark = node.start_mark
        return ExperimentError([f"{path or '(top level)'}: {problem} (line {mark.line + 1}, "
                                f"column {mark.column + 1})"])

    if key in open_:
        raise refuse("a YAML alias refers to a collection that contains it")
    if depth > MAX_DEPTH:
        raise refuse(f"nested deeper than {MAX_DEPTH} levels")
    open_.add(key)
    total = 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "?"
            total += _measure(k, path, sizes, open_, depth + 1)
            total += _measure(v, _join(path, name), sizes, open_, depth + 1)
            if total > MAX_VALUES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            total += _measure(v, f"{path}[{i}]", sizes, open_, depth + 1)
            if total > MAX_VALUES:
                break
    open_.discard(key)
    if total > MAX_VALUES:
        raise refuse(f"expands to more than {MAX_VALUES} values through YAML aliases "
                     "(anchors used inside anchors?)")
    sizes[key] = total
    return total


# A pydantic error location is a walk through the models: a field name inside a model, an index
# inside a tuple, a key inside a dict (then "[key]" when the key itself is wrong) and, inside a
# union of several types, the name of the member that was tried ("int", "Goal",
# "tuple[Goal, ...]", "literal['auto']"). Spelling cannot tell a member name from a key (a
# parameter may be called "int"), so the location is walked along the models' own types: only
# a part that stands where a union is gets dropped as a member name.
_UNKNOWN: Any = object()  # a type the walk cannot follow: the rest of the location is kept as is


def _locate(loc: tuple[int | str, ...], root: type[BaseModel]) -> tuple[str, bool]:
    """The path of an error location, and whether the error is about a mapping key itself."""
    path, is_key, _ = _walk(loc, root)
    return path, is_key


def _walk(loc: tuple[int | str, ...], root: type[BaseModel]) -> tuple[str, bool, Any]:
    """``_locate``, and the type found at the end of the location (``_UNKNOWN`` if lost)."""
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
                return _join(out, part), True, _UNKNOWN
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
    return out or "(top level)", False, tp


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


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 2, 5, 5, 5
_SHORT.maxstring = _SHORT.maxother = 80


def _short(value: Any) -> str:
    """A repr fit for a message: bounded, however large or nested the value."""
    return _SHORT.repr(value)


_SECRET_FIELDS = frozenset({"headers", "body", "command", "storage"})
"""Where a value may hold a secret (a URL's password, a token, a header value, a DSN in an
argument; and all of ``prometheus`` and a target's ``env``): an error there never quotes it."""


def _may_hold_a_secret(path: str) -> bool:
    parts = re.split(r"[.\[]", path)
    return (parts[0] == "prometheus" or bool(_SECRET_FIELDS.intersection(parts))
            or (parts[0] == "target" and "env" in parts))


def _message(err: Any, hide: bool = False) -> str:
    kind, ctx = err["type"], err.get("ctx", {})

    def shown(value: Any) -> str:
        return "a value not shown (it may hold a secret)" if hide else _short(value)

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
        return f"{shown(err['input'])} does not match {ctx.get('pattern')}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if kind == "literal_error":
        return f"{shown(err['input'])} is not one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "finite_number":
        return f"must be a finite number, not {shown(err['input'])}"
    if kind == "string_type" and isinstance(err.get("input"), dict):
        return (f"must be text (in quotes: YAML reads {{...}} and key: value as a mapping), "
                f"not {shown(err['input'])}")
    if kind in ("tuple_type", "list_type"):  # "a valid tuple" is Python's word, not YAML's
        return (f"must be a list (a '- item' line each, or [a, b]), not "
                f"{shown(err['input'])}")
    if kind in ("float_type", "int_type", "int_from_float") and not hide:
        what = "a whole number" if kind != "float_type" else "a number"
        got = err.get("input")
        if isinstance(got, bool):  # YAML's true/yes/on
            return f"must be {what}, not the boolean {str(got).lower()}"
        if isinstance(got, str):
            return f"must be {what}, not the text {shown(got)} (numbers are written unquoted)"
        return f"must be {what}, not {shown(got)}"
    if "input" not in err:
        return str(err["msg"])
    if hide:
        return f"{err['msg'].lower()} (the value is not shown: it may hold a secret)"
    return f"{err['msg'].lower()} (got {_short(err['input'])})"


@cache
def _key_homes(root: type[BaseModel] = Experiment) -> dict[str, list[str]]:
    """Every key of the experiment's models and the sections it belongs in (``capture`` ->
    ``measure``): a key written at the wrong level is told where it goes."""
    homes: dict[str, list[str]] = {}

    def visit(model: type[BaseModel], where: str, seen: frozenset[type[BaseModel]]) -> None:
        for key, field in _fields(model).items():
            homes.setdefault(key, []).append(where or "(top level)")
            for member in _models_in(field.annotation):
                if member not in seen:
                    visit(member, _join(where, key) if where else key, seen | {member})

    visit(root, "", frozenset({root}))
    return homes


def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The models a field's value may be (inside unions, tuples and mappings)."""
    found: list[type[BaseModel]] = []
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            found.append(member)
        elif get_origin(member) in (tuple, list, dict):
            args = [a for a in get_args(member) if a is not Ellipsis]
            for arg in args[-1:]:  # a tuple's items, a mapping's values
                found += _models_in(arg)
    return found


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """"unknown key", with the likely intended key: a near spelling among the keys allowed
    here, or the section the key belongs in."""
    key = str(loc[-1])
    _, _, parent = _walk(loc[:-1], Experiment) if loc[:-1] else ("", False, Experiment)
    models = [m for m in _members(parent)
              if isinstance(m, type) and issubclass(m, BaseModel)]
    allowed = sorted({k for m in models for k in _fields(m)})
    close = difflib.get_close_matches(key.lower().replace("-", "_"), allowed, n=1, cutoff=0.75)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    homes = [h for h in _key_homes().get(key, [])]
    if homes:
        return f"unknown key here: {key!r} belongs under {' or '.join(homes[:3])}"
    if allowed:
        return f"unknown key (allowed here: {', '.join(allowed)})"
    return "unknown key"


_MEMBER_TYPE_ERRORS = frozenset({"string_type", "tuple_type", "list_type", "dict_type",
                                  "model_type", "model_attributes_type", "float_type",
                                  "int_type", "bool_type"})
"""Errors saying a value is not of one member's type (of a union: another member may fit)."""


def format_validation_error(e: ValidationError) -> list[str]:
    by_path: dict[str, list[str]] = {}
    non_finite: set[str] = set()
    mistyped: dict[str, tuple[set[str], Any]] = {}
    unknown: dict[str, set[str]] = {}  # path -> its keys reported unknown
    deeper_kinds: dict[str, set[str]] = {}  # path -> the kinds of errors at paths below it
    for err in e.errors():
        path, is_key = _locate(err["loc"], Experiment)
        message = _message(err, hide=_may_hold_a_secret(path))
        if err["type"] in _MEMBER_TYPE_ERRORS and not is_key:
            mistyped.setdefault(path, (set(), err["input"]))[0].add(message)
        if err["type"] == "extra_forbidden":
            parent, _ = _locate(err["loc"][:-1], Experiment) if err["loc"][:-1] else ("", False)
            unknown.setdefault(parent, set()).add(str(err["loc"][-1]))
            message = _unknown_key(err["loc"])
        if is_key:
            message = (f"a key must be text (got {_short(err['input'])}; quote it)"
                       if err["type"] == "string_type" else f"key: {message}")
        elif err["type"] == "finite_number":
            non_finite.add(path)
        by_path.setdefault(path, []).append(message)
        deeper_kinds.setdefault(path, set()).add(err["type"])
    # A mapping where a union takes text or a model (``metrics.x: {query: .., descripton: ..}``)
    # fails both members: "not a valid string" then says nothing the model's own error below
    # it (the misspelt key) does not say better. Kept when the model took none of its keys
    # (``up: {job="api"}``: unquoted PromQL that YAML read as a mapping, text was meant).
    # So is a mapping of the model's own keys that its validator refused at the same path
    # (``metrics.x: {query: ''}``: review finding, "must be text" said the form was wrong).
    for path, (said, value) in mistyped.items():
        below = {kind for other, kinds in deeper_kinds.items()
                 if other.startswith((f"{path}.", f"{path}[")) for kind in kinds}
        refused = (isinstance(value, dict) and not unknown.get(path)
                   and bool(deeper_kinds.get(path, set()) - _MEMBER_TYPE_ERRORS))
        if not below and not refused:
            continue
        taken = (not isinstance(value, dict) or refused or bool(below - {"extra_forbidden"})
                 or bool({str(k) for k in value} - unknown.get(path, set())))
        if taken:
            by_path[path] = [m for m in by_path[path] if m not in said]
    lines = []
    for path, messages in by_path.items():
        if not messages:
            continue
        if path in non_finite:
            # A NaN where a union allows a number or text: "not a valid string" says nothing.
            messages = [m for m in messages if m.startswith("must be a finite number")]
        unique = list(dict.fromkeys(messages))
        # A value that fits no member of a union yields one message per member: keep it short.
        lines.append(f"{path}: {unique[0]}" if len(unique) == 1
                     else f"{path}: {' / '.join(unique[:3])}")
    return lines
