"""Whether a value is what its annotation promises, for the types the codec knows.

The codec (:mod:`sqlq_orm.tasks.codec`) stores and rebuilds values by annotation but
does not check them: ``Order("not-an-int", 5)`` would be stored, and a stored ``5``
handed to a parameter now annotated ``Order``. :func:`type_problem` says what does not
fit (with the path inside the value), or None. It is called at the boundaries the
annotations promise: each argument at enqueue, each stored argument when the worker
(or ``sqlq check --handlers``) binds it, and a task's return value when its run ends.

Checked: ``int``, ``float`` (an ``int`` is accepted, as type checkers do), ``str``,
``bool``, ``None``, ``Any``, ``Optional``/unions, ``Literal``, ``Annotated``, lists,
tuples, sets, dicts and their ``collections.abc`` forms, dataclasses (each field
against its annotation), ``TypedDict`` (required keys, no unknown keys, each value)
and pydantic models (an instance; pydantic validates its own fields). Any other class
is checked with ``isinstance``. Not checked (accepted as they are): type variables,
forward references that do not resolve, ``Callable`` and other generics the codec
does not store. ``docs/reference/validation.md`` says the same for users.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import functools
import types
import typing
from typing import Any, Literal, NotRequired, Required, Union

from sqlq_orm.tasks.codec import pydantic_base

MAX_DEPTH = 200
"""Deeper values are not looked into further (the payload's own depth limit refuses them)."""

_SEQUENCES = (list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence)
_COLLECTIONS = (abc.Iterable, abc.Collection, abc.Set, abc.MutableSet)
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)


def type_problem(value: Any, hint: Any, name: str = "") -> str | None:
    """Why ``value`` (named ``name``) does not fit ``hint``, or None: e.g.
    ``order.qty must be int, got str 'five'``."""
    return _problem(value, hint, name, 0)


def _problem(value: Any, hint: Any, path: str, depth: int) -> str | None:
    if depth > MAX_DEPTH or hint is Any or hint is object or isinstance(hint, typing.TypeVar):
        return None
    if hint is None or hint is type(None):
        return None if value is None else _wrong(value, "None", path)
    if hint is bool:
        return None if type(value) is bool else _wrong(value, "bool", path)
    if hint is int:
        return None if _is_int(value) else _wrong(value, "int", path)
    if hint is float:
        ok = _is_int(value) or isinstance(value, float)
        return None if ok else _wrong(value, "float", path)
    if hint is str:
        return None if isinstance(value, str) else _wrong(value, "str", path)
    supertype = getattr(hint, "__supertype__", None)
    if supertype is not None:  # typing.NewType
        return _problem(value, supertype, path, depth)
    origin = typing.get_origin(hint)
    if origin is not None:
        return _generic_problem(value, hint, origin, path, depth)
    if not isinstance(hint, type):
        return None  # a string that did not resolve, a special form: not checked
    if dataclasses.is_dataclass(hint):
        return _dataclass_problem(value, hint, path, depth)
    if typing.is_typeddict(hint):
        return _typeddict_problem(value, hint, path, depth)
    pydantic_model = pydantic_base()
    if pydantic_model is not None and issubclass(hint, pydantic_model):
        return None if isinstance(value, hint) else _wrong(value, hint.__name__, path)
    if hint in _SEQUENCES or hint in _COLLECTIONS:
        return _items_problem(value, hint, (), path, depth)
    if hint in _MAPPINGS:
        return None if isinstance(value, abc.Mapping) else _wrong(value, "dict", path)
    return None if isinstance(value, hint) else _wrong(value, hint.__name__, path)


def _generic_problem(value: Any, hint: Any, origin: Any, path: str, depth: int) -> str | None:
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        return _problem(value, arguments[0], path, depth)
    if origin in (Union, types.UnionType):
        if any(_problem(value, member, path, depth) is None for member in arguments):
            return None
        return _wrong(value, " | ".join(_name(member) for member in arguments), path)
    if origin is Literal:
        # ``Literal[1]`` does not take ``True`` (equal, but not what was written).
        if any(type(value) is type(a) and value == a for a in arguments):
            return None
        return _wrong(value, f"one of {list(arguments)!r}", path)
    if origin in _SEQUENCES or origin in _COLLECTIONS:
        return _items_problem(value, origin, arguments, path, depth)
    if origin in _MAPPINGS:
        if not isinstance(value, abc.Mapping):
            return _wrong(value, "dict", path)
        key_hint, item_hint = arguments if len(arguments) == 2 else (Any, Any)
        for key, item in value.items():
            problem = _problem(key, key_hint, f"{path} key {key!r}", depth + 1)
            problem = problem or _problem(item, item_hint, f"{path}[{key!r}]", depth + 1)
            if problem:
                return problem
        return None
    return None  # Callable[...], type[...], a user's generic: not checked


def _items_problem(
    value: Any, origin: Any, arguments: tuple[Any, ...], path: str, depth: int
) -> str | None:
    if isinstance(value, (str, bytes, abc.Mapping)) or not isinstance(value, abc.Iterable):
        return _wrong(value, _name(origin), path)
    items = list(value)
    if origin is tuple and arguments and not (len(arguments) == 2 and arguments[1] is ...):
        if arguments == ((),):  # tuple[()]
            arguments = ()
        if len(items) != len(arguments):
            return f"{_where(path)}must have {len(arguments)} items, got {len(items)}"
        hints = list(arguments)
    else:
        hints = [arguments[0] if arguments else Any] * len(items)
    for index, (item, item_hint) in enumerate(zip(items, hints, strict=True)):
        problem = _problem(item, item_hint, f"{path}[{index}]", depth + 1)
        if problem:
            return problem
    return None


def _dataclass_problem(value: Any, cls: type, path: str, depth: int) -> str | None:
    if not isinstance(value, cls):
        return _wrong(value, cls.__name__, path)
    for name, hint in _field_hints(cls).items():
        problem = _problem(getattr(value, name), hint, f"{path}.{name}", depth + 1)
        if problem:
            return problem
    return None


def _typeddict_problem(value: Any, cls: type, path: str, depth: int) -> str | None:
    if not isinstance(value, abc.Mapping):
        return _wrong(value, cls.__name__, path)
    hints, required = _typeddict_keys(cls)
    missing = sorted(required - value.keys())
    if missing:
        return f"{_where(path)}({cls.__name__}) is missing the key {missing[0]!r}"
    for key, item in value.items():
        if key not in hints:
            return f"{_where(path)}({cls.__name__}) has no key {key!r}"
        problem = _problem(item, hints[key], f"{path}[{key!r}]", depth + 1)
        if problem:
            return problem
    return None


@functools.lru_cache(maxsize=1024)
def _field_hints(cls: type) -> dict[str, Any]:
    """A dataclass's init fields and their annotations (Any where one does not resolve)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: that field is not checked
        hints = {}
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


@functools.lru_cache(maxsize=1024)
def _typeddict_keys(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's value annotations and its required keys. ``NotRequired[...]`` is
    read from the resolved annotations: ``__required_keys__`` misses it where the
    annotations are strings (``from __future__ import annotations``)."""
    try:
        extras = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable: keys are known, values not checked
        names = getattr(cls, "__annotations__", {})
        return dict.fromkeys(names, Any), frozenset(getattr(cls, "__required_keys__", ()))
    optional = set(getattr(cls, "__optional_keys__", ()))
    hints: dict[str, Any] = {}
    required = set()
    for key, hint in extras.items():
        while typing.get_origin(hint) in (typing.Annotated, NotRequired, Required):
            if typing.get_origin(hint) is NotRequired:
                optional.add(key)
            elif typing.get_origin(hint) is Required:
                optional.discard(key)
            hint = typing.get_args(hint)[0]
        hints[key] = hint
        if key not in optional:
            required.add(key)
    return hints, frozenset(required)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _name(hint: Any) -> str:
    if hint is type(None) or hint is None:
        return "None"
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__name__
    return repr(hint).replace("typing.", "")


def _where(path: str) -> str:
    return f"{path.lstrip('.')} " if path else ""


def _wrong(value: Any, expected: str, path: str) -> str:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{_where(path)}must be {expected}, got {type(value).__name__} {shown}"
