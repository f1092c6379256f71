"""The descriptions of scenario keys: the docstring under each field of a scenario model.

A key's description is the string literal written under its annotation in the model's
class body (pydantic's "attribute docstring").  Pydantic can read them as each class is
built (``use_attribute_docstrings``), but that reads and parses the source of every
model at import: about a third of importing :mod:`clustersim.scenario` (0.11 s of every
``clustersim`` command, measured on 2 cores), for text that only the JSON Schema
(``clustersim schema``) and the reference pages read.  So they are read here, when a
schema is made: :class:`DescribedJsonSchema` adds them where pydantic would have, giving
the same schema.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema


class DescribedJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema generator, each model's properties described by their
    attribute docstrings where the field gives no ``description`` of its own."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        """The schema of one model, its properties described (see the class docstring)."""
        json_schema = super().model_schema(schema)
        described = field_descriptions(schema["cls"])
        properties = json_schema.get("properties")
        if not described or not isinstance(properties, dict):
            return json_schema
        for name, info in schema["cls"].model_fields.items():
            text = described.get(name)
            if text is None or info.description is not None:
                continue
            for key in (info.alias, name) if self.by_alias and info.alias else (name,):
                prop = properties.get(key)
                if isinstance(prop, dict):  # over a description its type gives, as pydantic
                    prop["description"] = text
                    break
        return json_schema


def field_descriptions(cls: type) -> dict[str, str]:
    """Field name -> the docstring under its annotation, taken from the nearest class of
    ``cls``'s method resolution order that annotates the field (where pydantic takes the
    field from: a subclass that annotates a field again makes it anew)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        annotated = klass.__dict__.get("__annotations__", {})
        if not annotated:
            continue
        own = _attribute_docstrings(klass)
        for name in annotated:
            if name in own:
                out[name] = own[name]
            else:
                out.pop(name, None)
    return out


@cache
def _attribute_docstrings(klass: type) -> dict[str, str]:
    """Name -> docstring of each annotated attribute of ``klass``'s own body: a string
    statement right after an annotated assignment (cleaned as :func:`inspect.cleandoc`)."""
    try:
        source = textwrap.dedent("".join(inspect.getsourcelines(klass)[0]))
    except (OSError, TypeError):
        return {}
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return {}
    if not body or not isinstance(body[0], ast.ClassDef):
        return {}
    out: dict[str, str] = {}
    previous: ast.stmt | None = None
    for statement in body[0].body:
        if (
            isinstance(previous, ast.AnnAssign)
            and isinstance(previous.target, ast.Name)
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            out[previous.target.id] = inspect.cleandoc(statement.value.value)
        previous = statement
    return out


def described_json_schema(model: Any, **options: Any) -> dict[str, Any]:
    """``model.model_json_schema(**options)`` with the attribute docstrings as descriptions."""
    return model.model_json_schema(schema_generator=DescribedJsonSchema, **options)  # type: ignore[no-any-return]
