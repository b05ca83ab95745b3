"""JSON Schemas generated from the contract's dataclasses, so a published schema cannot drift from the
types that read the files (record.schema.json, probe-result.schema.json).

The types use few shapes: str, int, float, bool, `X | None`, unions of scalars, `tuple[X, ...]`,
`Mapping[str, X]`, nested dataclasses, and `Any`/`object` for free JSON. A field's JSON name is its
own unless its metadata says `key` (`class` is not a Python name); `doc` becomes its description.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

_KINDS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def json_key(f: dataclasses.Field[Any]) -> str:
    """The name a field has in the JSON file."""
    return str(f.metadata.get("key", f.name))


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, resolved (the modules use `from __future__ import annotations`); once per class:
    resolving them is most of the time a report spends reading thousands of probe results."""
    return typing.get_type_hints(cls)


def schema_of(hint: Any, *, describe: bool = False) -> dict[str, Any]:
    """The JSON Schema of one annotation."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        if all(m in _KINDS for m in members):
            kinds = [_KINDS[m] for m in members] + (["null"] if nullable else [])
            return {"type": kinds[0] if len(kinds) == 1 else kinds}
        (inner,) = members  # a nullable structure: X | None
        schema = schema_of(inner, describe=describe)
        if nullable and "type" in schema:
            schema["type"] = [schema["type"], "null"]
        return schema
    if hint in _KINDS:
        return {"type": _KINDS[hint]}
    if origin is tuple:
        return {"type": "array", "items": _items(args[0], describe)}
    if origin is Mapping or origin is dict:
        values = schema_of(args[1], describe=describe)
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return object_schema(hint, describe=describe)
    return {}  # Any, object: free JSON


def _items(hint: Any, describe: bool) -> dict[str, Any]:
    """Array items; an item of a type without a schema of its own is an object (the record's metrics rows)."""
    return schema_of(hint, describe=describe) or {"type": "object"}


def object_schema(cls: type, overrides: Mapping[str, dict[str, Any]] | None = None, *, describe: bool = False) -> dict[str, Any]:
    """A dataclass as an object schema: its fields' schemas (or `overrides` by JSON name), required where
    the field has no default (or its metadata says `required`), and with `describe`, the class docstring's
    first paragraph and each field's `doc` as descriptions."""
    types_ = hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        key = json_key(f)
        props[key] = dict((overrides or {}).get(key) or schema_of(types_[f.name], describe=describe))
        if describe and f.metadata.get("doc"):
            props[key]["description"] = f.metadata["doc"]
        if f.metadata.get("required") or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
            required.append(key)
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    if describe and cls.__doc__:
        schema = {"description": " ".join(cls.__doc__.strip().split("\n\n")[0].split()), **schema}
    return schema
