"""Task arguments to JSON and back, steered by each parameter's annotation.

A job's arguments are stored as JSON. What JSON carries as it is (``str``, ``int``,
finite ``float``, ``bool``, ``None``, lists and string-keyed dicts of those) is stored
as it is; three kinds of value are converted on the way in and rebuilt on the way out,
because the annotation says what to rebuild: dataclasses, ``TypedDict`` (a dict
already), and pydantic models (when pydantic is installed). Containers of them
(``list[Point]``, ``dict[str, Point]``, ``tuple[Point, ...]``, ``Point | None``) work too.
Anything else is refused at enqueue time, naming the argument.

Converters are built once per parameter (:func:`converter_for`), so a task whose
parameters are plain JSON types pays for no conversion at all.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union

from sqlq_orm.core.validation import MAX_JSON_DEPTH

Convert = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Converter:
    """How one parameter's value goes to JSON (``encode``) and back (``decode``);
    None where the value is stored as it is."""

    encode: Convert | None = None
    decode: Convert | None = None


PLAIN = Converter()


def pydantic_base() -> type | None:
    # Only when the app has imported pydantic: a task module that uses a model has.
    module = sys.modules.get("pydantic")
    return getattr(module, "BaseModel", None) if module is not None else None


def converter_for(hint: Any) -> Converter:
    """The converter of a parameter annotated ``hint`` (PLAIN when none is needed)."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_converter(hint)
    pydantic_model = pydantic_base()
    if pydantic_model is not None and isinstance(hint, type) and issubclass(hint, pydantic_model):
        model: Any = hint
        return Converter(lambda value: value.model_dump(mode="json"), model.model_validate)
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        return converter_for(arguments[0])
    if origin in (Union, types.UnionType):
        return _union_converter(arguments)
    if origin in (list, tuple, set, frozenset) or _is_abc_sequence(origin):
        return _sequence_converter(origin, arguments)
    if origin is dict or _is_abc_mapping(origin):
        inner = converter_for(arguments[1]) if len(arguments) == 2 else PLAIN
        return _mapping_converter(inner)
    if hint in (tuple, set, frozenset):
        return _sequence_converter(hint, ())
    return PLAIN


def _is_abc_sequence(origin: Any) -> bool:
    return origin in (abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection)


def _is_abc_mapping(origin: Any) -> bool:
    return origin in (abc.Mapping, abc.MutableMapping)


def _dataclass_converter(cls: type) -> Converter:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: its values stay as they are
        hints = {}
    fields = [f for f in dataclasses.fields(cls) if f.init]
    inner = {f.name: converter_for(hints.get(f.name, Any)) for f in fields}

    def encode(value: Any) -> Any:
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            return value
        out = {}
        for field in fields:
            item = getattr(value, field.name)
            convert = inner[field.name].encode
            out[field.name] = convert(item) if convert is not None and item is not None else item
        return out

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        kwargs = {}
        for name, item in value.items():
            convert = inner[name].decode if name in inner else None
            kwargs[name] = convert(item) if convert is not None and item is not None else item
        return cls(**kwargs)

    return Converter(encode, decode)


def _union_converter(arguments: tuple[Any, ...]) -> Converter:
    # ``X | None`` (and unions of one convertible type with JSON types): convert the
    # values the convertible member owns, leave the rest.
    options = [(a, converter_for(a)) for a in arguments if a is not type(None)]
    convertible = [(a, c) for a, c in options if c is not PLAIN]
    if not convertible:
        return PLAIN
    if len(convertible) == 1 and len(options) == 1:
        return convertible[0][1]

    def encode(value: Any) -> Any:
        for member, converter in convertible:
            if isinstance(member, type) and isinstance(value, member) and converter.encode:
                return converter.encode(value)
        return value

    def decode(value: Any) -> Any:
        # A dict goes to the first member that rebuilds one; other values stay.
        for _member, converter in convertible:
            if converter.decode is not None and isinstance(value, dict):
                return converter.decode(value)
        return value

    return Converter(encode, decode)


def _sequence_converter(origin: Any, arguments: tuple[Any, ...]) -> Converter:
    if origin is tuple and len(arguments) > 1 and arguments[-1] is not Ellipsis:
        return _fixed_tuple_converter(arguments)
    item = converter_for(arguments[0]) if arguments else PLAIN
    rebuild: Callable[[list[Any]], Any] | None = None
    if origin in (tuple, set, frozenset):
        rebuild = origin
    if item is PLAIN and rebuild is None:
        return PLAIN
    item_encode, item_decode = item.encode, item.decode

    def encode(value: Any) -> Any:
        if item_encode is None:
            return list(value) if isinstance(value, (tuple, set, frozenset)) else value
        return [item_encode(v) if v is not None else v for v in value]

    def decode(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        items = [item_decode(v) if v is not None else v for v in value] if item_decode else value
        return rebuild(items) if rebuild is not None else items

    return Converter(encode, decode)


def _fixed_tuple_converter(arguments: tuple[Any, ...]) -> Converter:
    items = [converter_for(a) for a in arguments]

    def encode(value: Any) -> Any:
        return [
            c.encode(v) if c.encode is not None and v is not None else v
            for c, v in zip(items, value, strict=False)
        ]

    def decode(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return tuple(
            c.decode(v) if c.decode is not None and v is not None else v
            for c, v in zip(items, value, strict=False)
        )

    return Converter(encode, decode)


def _mapping_converter(inner: Converter) -> Converter:
    if inner is PLAIN:
        return PLAIN
    encode_item, decode_item = inner.encode, inner.decode

    def encode(value: Any) -> Any:
        if not isinstance(value, Mapping) or encode_item is None:
            return value
        return {k: encode_item(v) if v is not None else v for k, v in value.items()}

    def decode(value: Any) -> Any:
        if not isinstance(value, dict) or decode_item is None:
            return value
        return {k: decode_item(v) if v is not None else v for k, v in value.items()}

    return Converter(encode, decode)


_JSON_SCALARS = (str, int, bool, type(None))


def json_problem(value: Any) -> str | None:
    """Why ``value`` is not plain JSON (with the path inside it), or None if it is.

    Stricter than ``json.dumps``: dict keys must be strings (JSON would turn ``1``
    into ``"1"``) and floats finite; tuples pass (they come back as lists, or as
    tuples where the annotation says so).
    """
    kind = type(value)
    if kind in _JSON_SCALARS:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"{value!r} is not a finite number"
    return _container_problem(value, "", 0)


def _container_problem(value: Any, path: str, depth: int) -> str | None:
    if depth >= MAX_JSON_DEPTH:
        return (
            f"it is nested more than {MAX_JSON_DEPTH} levels deep{_at(path)} (the limit "
            "of arrays and objects in a payload, on every database)"
        )
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if type(item) in _JSON_SCALARS:
                continue
            problem = _scalar_or_container(item, f"{path}[{index}]", depth)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"it has the key {key!r}{_at(path)}; JSON keys are strings"
            if type(item) in _JSON_SCALARS:
                continue
            problem = _scalar_or_container(item, f"{path}[{key!r}]", depth)
            if problem:
                return problem
        return None
    return f"{type(value).__name__} is not a JSON type{_at(path)}"


def _scalar_or_container(value: Any, path: str, depth: int) -> str | None:
    if type(value) is float:
        return None if math.isfinite(value) else f"{value!r}{_at(path)} is not a finite number"
    if type(value) in _JSON_SCALARS:
        return None
    return _container_problem(value, path, depth + 1)


def _at(path: str) -> str:
    return f" (at {path})" if path else ""
