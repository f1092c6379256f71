"""Validation with clear errors: pydantic's errors as problems at YAML key paths.

:func:`validate_model` validates any pydantic model this way, so workload plugins
check their own section as the scenario does: every problem at once, each with
the path of YAML key names and list indices (``stragglers[1].slowdown``), in
document order, in plain English.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, Tag, ValidationError

from clustersim.errors import Problem, ScenarioError, hinted, join_path

from .fields import TAG_ERROR, Invalid

M = TypeVar("M", bound=BaseModel)


def validate_model(
    model_cls: type[M],
    data: Any,
    path_prefix: str = "",
    source: str = "",
    context: Mapping[str, Any] | None = None,
) -> M:
    """``model_cls`` validated from ``data``, or :class:`ScenarioError` with every problem.

    Paths use the YAML key names and list indices, prefixed with ``path_prefix``
    (e.g. ``"workload.program"``); ``source`` names the file in the messages.  ``context``
    reaches the models' validators (``base_dir``: the folder preset files are relative to).
    """
    try:
        return model_cls.model_validate(data, context=dict(context) if context else None)
    except ValidationError as exc:
        problems = _problems(model_cls, data, exc.errors(include_url=False))
        prefixed = [Problem(join_path(path_prefix, p.path), p.message, p.allowed) for p in problems]
        raise ScenarioError(prefixed, source) from None


def _problems(model_cls: type[BaseModel], data: Any, errors: Sequence[Any]) -> list[Problem]:
    """Pydantic errors as problems: plain words, YAML paths, document order, no duplicates."""
    found: list[Problem] = []
    for error in errors:
        found.extend(_error_problems(model_cls, error))
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda p: _document_position(data, p.path))


def _error_problems(model_cls: type[BaseModel], error: Any) -> list[Problem]:
    """The problems one pydantic error stands for."""
    loc = tuple(error["loc"])
    parts, annotation = _walk(model_cls, loc)
    _, parent = _walk(model_cls, loc[:-1])
    path = join_path(*parts)
    kind = error["type"]
    exc = error.get("ctx", {}).get("error")
    if isinstance(exc, Invalid):
        return [Problem(join_path(path, p.path), p.message, p.allowed) for p in exc.problems]
    if kind == TAG_ERROR:
        return [_tag_problem(path, error)]
    if kind == "extra_forbidden":
        return [_unknown_key_problem(path, parts[-1] if parts else "", parent)]
    if kind == "missing" and _tuple_length(parent):
        parent_path = join_path(*parts[:-1])
        return [Problem(parent_path, f"must have exactly {_tuple_length(parent)} items")]
    message, allowed = _message(error, annotation)
    if loc and loc[-1] == "[key]":
        message = message.replace("unknown value", "unknown key", 1)
    if loc and (kind in _RANGE_ERRORS or kind in _NUMBER_ERRORS):
        allowed = _range_text(parent, loc[-1], whole=kind in _RANGE_ERRORS) or allowed
    return [Problem(path, message, allowed)]


_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
_NUMBER_ERRORS = (
    "int_type",
    "int_parsing",
    "int_from_float",
    "float_type",
    "float_parsing",
    "finite_number",
)
_BOUND_WORDS = {"gt": "above {}", "ge": "at least {}", "lt": "below {}", "le": "at most {}"}


def _range_text(parent: Any, item: str | int, whole: bool = False) -> str:
    """The range a number at ``parent``'s part ``item`` must lie in, in words
    (``at least 1e-06 and at most 1e+06``), from the bounds of its field type; "" when it
    has none, or only one and ``whole`` (a range error's message says that one)."""
    if isinstance(parent, type) and issubclass(parent, BaseModel):
        field = next((f for n, f in parent.model_fields.items() if item in (n, f.alias)), None)
        metadata = list(field.metadata) if field is not None else []
    else:
        metadata = _annotated_metadata(_child(parent, item))
    bounds = {}
    for entry in metadata:
        for key in _BOUND_WORDS:
            value = getattr(entry, key, None)
            if value is not None and not isinstance(entry, type):
                bounds[key] = value
    if len(bounds) < (2 if whole else 1):
        return ""
    words = [_BOUND_WORDS[k].format(_number_text(v)) for k, v in bounds.items()]
    return " and ".join(words)


def _annotated_metadata(annotation: Any) -> list[Any]:
    """The metadata of an ``Annotated`` type, a pydantic ``Field``'s own metadata spread out."""
    found: list[Any] = []
    while typing.get_origin(annotation) is Annotated:
        annotation, *extra = typing.get_args(annotation)
        for entry in extra:
            found.extend(getattr(entry, "metadata", None) or [entry])
    return found


def _number_text(value: object) -> str:
    """A bound as written in a message: ``1e-06``, ``0.5``, ``4294967295``."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _unknown_key_problem(path: str, key: object, model: Any) -> Problem:
    """An unknown key, with a did-you-mean hint and the keys allowed at its place."""
    keys = _model_keys(model)
    return Problem(path, hinted("unknown key", key, keys), ", ".join(keys))


def _tag_problem(path: str, error: Any) -> Problem:
    """A value that matches no member of a tagged union (e.g. an unknown ``kind``)."""
    ctx, data = error.get("ctx", {}), error.get("input")
    key, choices = ctx.get("key"), ctx.get("choices", "")
    allowed = choices or ctx.get("allowed", "")
    if not isinstance(data, dict):
        got = _describe(data)
        return Problem(
            path, f"must be a mapping of keys to values, got {got}", ctx.get("allowed", "")
        )
    if key is None:
        return Problem(path, error["msg"], allowed)
    if key not in data:
        return Problem(join_path(path, key), "required key missing", allowed)
    value = data[key]
    message = hinted(f"unknown {key} {_describe(value)}", value, choices.split(", "))
    return Problem(join_path(path, key), message, allowed)


_SIMPLE_MESSAGES = {
    "missing": "required key missing",
    "int_type": "must be a whole number, got {got}",
    "int_parsing": "must be a whole number, got {got}",
    "int_from_float": "must be a whole number, got {got}",
    "float_type": "must be a number, got {got}",
    "float_parsing": "must be a number, got {got}",
    "finite_number": "must be a finite number, got {got}",
    "bool_type": "must be true or false, got {got}",
    "bool_parsing": "must be true or false, got {got}",
    "string_type": "must be text, got {got}",
    "list_type": "must be a list, got {got}",
    "tuple_type": "must be a list, got {got}",
    "set_type": "must be a list, got {got}",
    "dict_type": "must be a mapping of keys to values, got {got}",
    "model_type": "must be a mapping of keys to values, got {got}",
    "model_attributes_type": "must be a mapping of keys to values, got {got}",
    "greater_than": "must be greater than {gt}, got {got}",
    "greater_than_equal": "must be at least {ge}, got {got}",
    "less_than": "must be less than {lt}, got {got}",
    "less_than_equal": "must be at most {le}, got {got}",
    "multiple_of": "must be a multiple of {multiple_of}, got {got}",
    "none_required": "must be empty (null), got {got}",
}


def _message(error: Any, annotation: Any) -> tuple[str, str]:
    """(message, allowed) for one pydantic error, in plain words."""
    kind, ctx = error["type"], dict(error.get("ctx", {}))
    got = _describe(error.get("input"))
    if kind in _SIMPLE_MESSAGES:
        numbers = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
        return _SIMPLE_MESSAGES[kind].format(got=got, **numbers), ""
    if kind in ("literal_error", "enum"):
        return _choice_message(error.get("input"), annotation, ctx)
    if kind in ("value_error", "assertion_error"):
        exc = ctx.get("error")
        return str(exc), getattr(exc, "allowed", "")
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        return _length_message(kind, ctx, annotation), ""
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _builtin_tag_message(kind, ctx)
    return _plain(error["msg"]), ""


def _choice_message(value: object, annotation: Any, ctx: Mapping[str, Any]) -> tuple[str, str]:
    """A value that is not one of a fixed set of choices."""
    choices = [str(c) for c in typing.get_args(annotation)] if _is_literal(annotation) else []
    allowed = ", ".join(choices) or str(ctx.get("expected", "")).replace("'", "")
    return hinted(f"unknown value {_describe(value)}", value, choices), allowed


def _length_message(kind: str, ctx: Mapping[str, Any], annotation: Any) -> str:
    """Too few or too many items (or characters)."""
    exact = _tuple_length(annotation)
    if exact:
        return f"must have exactly {exact} items, got {ctx.get('actual_length', 'another number')}"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    unit = "characters" if kind.startswith("string") else "items"
    if "short" in kind:
        return f"must have at least {ctx.get('min_length')} {unit}"
    return f"must have at most {ctx.get('max_length')} {unit}"


def _builtin_tag_message(kind: str, ctx: Mapping[str, Any]) -> tuple[str, str]:
    """Pydantic's own discriminator errors (models that do not use :func:`_tagged`)."""
    key = str(ctx.get("discriminator", "")).strip("'")
    allowed = str(ctx.get("expected_tags", "")).replace("'", "")
    if kind == "union_tag_not_found":
        return f"required key {key!r} missing", allowed
    tag = str(ctx.get("tag", ""))
    return hinted(f"unknown {key} {tag!r}", tag, allowed.split(", ")), allowed


def _plain(message: str) -> str:
    """Pydantic's wording of an uncommon error, without its jargon."""
    message = re.sub(r"^Input should be", "must be", message)
    message = re.sub(r"\bvalid ", "", message)
    return message.replace("Input", "value")


def _describe(value: object) -> str:
    """A short description of a YAML value, for 'got ...'."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------- walking types


def _walk(model_cls: type[BaseModel], loc: Sequence[str | int]) -> tuple[list[str | int], Any]:
    """Follow a pydantic error location through the model's types.

    Returns the user's key path (union member tags and validator labels dropped)
    and the type found at its end (``None`` once the types are lost).
    """
    parts: list[str | int] = []
    annotation: Any = model_cls
    for item in loc:
        annotation = _unwrap(annotation)
        if item == "[key]":  # a mapping's key itself is wrong: the path ends at the key
            annotation = typing.get_args(annotation)[0] if typing.get_args(annotation) else Any
            continue
        if _is_union(annotation):
            annotation = _union_member(annotation, item)
            continue
        parts.append(item)
        annotation = _child(annotation, item)
    return parts, _unwrap(annotation)


def _unwrap(annotation: Any) -> Any:
    """``annotation`` without ``Annotated[...]`` and without ``| None``."""
    while True:
        if typing.get_origin(annotation) is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif _is_union(annotation, count_none=False):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_union(annotation: Any, count_none: bool = True) -> bool:
    """Whether ``annotation`` is a union (with two or more members besides None if ``count_none``)."""
    if typing.get_origin(annotation) not in (Union, types.UnionType):
        return False
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    return len(members) > 1 or not count_none


def _union_member(union: Any, label: object) -> Any:
    """The member of ``union`` that pydantic labelled ``label`` (a tag or a class name)."""
    for member in typing.get_args(union):
        metadata = getattr(member, "__metadata__", ())
        if any(isinstance(m, Tag) and m.tag == label for m in metadata):
            return member
        if getattr(_unwrap(member), "__name__", None) == label:
            return member
    return None


def _child(annotation: Any, item: str | int) -> Any:
    """The type of ``annotation``'s part ``item``: a field, a list item, a mapping value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if item in (name, field.alias):
                return _field_type(field)
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, set, frozenset) or (origin is tuple and len(args) == 2 and args[1] is ...):
        return args[0] if args else Any
    if origin is tuple and isinstance(item, int) and item < len(args):
        return args[item]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    return None


def _field_type(field: Any) -> Any:
    """A field's annotation, with its discriminator (kept apart by pydantic) put back."""
    if field.discriminator is not None:
        return Annotated[field.annotation, field.discriminator]
    return field.annotation


def _is_literal(annotation: Any) -> bool:
    return typing.get_origin(annotation) is Literal


def _tuple_length(annotation: Any) -> int:
    """The length of a fixed-length tuple type, else 0."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is tuple and args and args[-1] is not ...:
        return len(args)
    return 0


def _model_keys(model: Any) -> list[str]:
    """The YAML keys of ``model`` (empty if it is not a model)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _document_position(data: Any, path: str) -> tuple[int, ...]:
    """Where ``path`` is in ``data``: the position of each key or index along it."""
    position: list[int] = []
    for index, key in _PATH_PART.findall(path):
        if isinstance(data, dict):
            keys = list(data)
            position.append(keys.index(key) if key in data else len(keys))
            data = data.get(key)
        elif isinstance(data, list) and index:
            position.append(int(index))
            data = data[int(index)] if int(index) < len(data) else None
        else:
            position.append(0)
            data = None
    return tuple(position)
