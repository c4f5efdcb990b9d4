"""A task function's signature: binding a call to a payload, and a payload back to a call.

The payload of a task's job is a JSON object of its arguments by parameter name
(``{"to": "a@example.com", "retries": 2}``); defaults are not stored, so a job enqueued
without an argument gets the default the code has when it runs. ``*args`` is stored
under its name as a list, ``**kwargs`` as an object.

Binding happens twice: at enqueue (:meth:`TaskSignature.payload_of`, before anything
is written: a missing, unexpected or non-JSON argument, or one that does not match its
annotation (:mod:`sqlq_orm.tasks.conformity`), raises
:class:`~sqlq_orm.errors.InvalidInput` naming it) and on the worker
(:meth:`TaskSignature.call_of`: a stored payload that no longer fits the function or
its annotations, after a deploy changed them, raises :class:`ArgumentsDoNotBind`).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlq_orm.core import redaction, validation
from sqlq_orm.errors import InvalidInput
from sqlq_orm.tasks.codec import Converter, converter_for, json_problem
from sqlq_orm.tasks.conformity import type_problem
from sqlq_orm.worker.handlers import JobContext

META_KEY = redaction.META_KEY
"""The payload key reserved for what travels with a job beside its arguments (a trace
context, see :mod:`sqlq_orm.tasks.tracing`; the names to redact, see
:mod:`sqlq_orm.core.redaction`); never passed to the function."""

ARGUMENTS_DO_NOT_BIND = "INVALID_INPUT:ARGUMENTS_DO_NOT_BIND"
"""The error code of a job whose stored arguments do not fit its task's signature."""


class ArgumentsDoNotBind(InvalidInput):
    """A job's stored arguments do not fit its task function's current signature."""


def _is_context(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, JobContext)


class TaskSignature:
    """What a task function takes, apart from the job's context.

    ``context`` is the name of the parameter annotated :class:`JobContext` (or
    :class:`AsyncJobContext`), which must come first, or None.
    """

    def __init__(
        self, function: Callable[..., Any], task_name: str, redact: Iterable[str] = ()
    ) -> None:
        self.task_name = task_name
        full = inspect.signature(function)
        try:
            hints = typing.get_type_hints(function)
        except Exception:  # noqa: BLE001 - an annotation that cannot be resolved: no conversion
            hints = {}
        parameters = list(full.parameters.values())
        self.context: str | None = None
        if parameters and _is_context(hints.get(parameters[0].name)):
            self.context = parameters[0].name
            parameters = parameters[1:]
        for parameter in parameters:
            if parameter.name == META_KEY:
                raise InvalidInput(f"task {task_name!r}: the parameter name {META_KEY} is reserved")
            if _is_context(hints.get(parameter.name)):
                raise InvalidInput(
                    f"task {task_name!r}: the JobContext parameter {parameter.name!r} must "
                    "come first (type checkers strip only a leading context from the "
                    "enqueue signature)"
                )
        # Resolved annotations, so messages show ``to: str``, not ``to: 'str'``.
        parameters = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in parameters]
        self.signature = full.replace(
            parameters=parameters, return_annotation=hints.get("return", full.return_annotation)
        )
        self.parameters = {p.name: p for p in parameters}
        self.redact = _redacted_parameters(task_name, redact, self.parameters)
        """The arguments kept out of what is displayed (``redact=`` of the task)."""
        self.converters: dict[str, Converter] = {
            p.name: converter_for(hints.get(p.name, Any)) for p in parameters
        }
        self.hints: dict[str, Any] = {p.name: hints.get(p.name, Any) for p in parameters}
        """Each parameter's annotation (``Any`` where it has none), as values are checked."""
        self.result_converter = converter_for(hints.get("return", Any))
        """How the function's return value is stored and read back (by its annotation)."""
        self.result_hint: Any = hints.get("return", Any)
        """The return annotation (``Any`` where there is none)."""
        kinds = {p.kind for p in parameters}
        self._simple = not kinds & {
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        }
        self._positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        self._required = {
            p.name
            for p in parameters
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }

    def arguments_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (defaults not filled in), or
        :class:`InvalidInput` naming what does not fit.

        The common call (no ``*args``, ``**kwargs`` or positional-only parameters, and
        nothing wrong) is bound here by hand; anything else goes through
        :meth:`inspect.Signature.bind`, which also words the errors.
        """
        if self._simple and len(args) <= len(self._positional):
            arguments = dict(zip(self._positional, args, strict=False))
            for name, value in kwargs.items():
                if name not in self.parameters or name in arguments:
                    break
                arguments[name] = value
            else:
                if self._required <= arguments.keys():
                    return arguments
        return dict(self.bind(args, kwargs).arguments)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> inspect.BoundArguments:
        """Bind a call, or raise :class:`InvalidInput` naming what does not fit."""
        try:
            return self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInput(
                f"task {self.task_name!r} cannot take these arguments: {exc}; nothing was "
                f"written (its signature is {self.signature})"
            ) from None

    def payload_of(self, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The JSON payload of a call's arguments by name (None for none)."""
        if not arguments:
            return None
        payload: dict[str, Any] = {}
        for name, value in arguments.items():
            problem = self.argument_problem(name, value)
            if problem is not None:
                raise InvalidInput(
                    f"task {self.task_name!r}: argument {name!r} does not match its "
                    f"annotation: {problem}; nothing was written"
                )
            encode = self.converters[name].encode
            if encode is not None and value is not None:
                try:
                    value = encode(value)
                except Exception as exc:  # noqa: BLE001 - a converter's error names the argument
                    why = type(exc).__name__
                    if name not in self.redact:  # the error may quote the value
                        why = f"{why}: {exc}"
                    raise InvalidInput(
                        f"task {self.task_name!r}: argument {name!r} cannot be stored "
                        f"({why}); nothing was written"
                    ) from None
            problem = json_problem(value)
            if problem is not None:
                shown = redaction.REDACTED if name in self.redact else _short(value)
                raise InvalidInput(
                    f"task {self.task_name!r}: argument {name!r} must be JSON, a dataclass, "
                    f"a TypedDict or a pydantic model, but {problem} (got "
                    f"{shown}); nothing was written"
                )
            payload[name] = value
        return redaction.mark(payload, self.redact.intersection(payload))

    def call_of(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments a stored ``payload`` calls the function
        with, or :class:`ArgumentsDoNotBind` saying why it cannot."""
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise ArgumentsDoNotBind(
                f"task {self.task_name!r} takes its arguments as a JSON object by parameter "
                f"name; the job's payload is a {type(payload).__name__}"
            )
        unknown = [name for name in payload if name not in self.parameters and name != META_KEY]
        if unknown:
            raise ArgumentsDoNotBind(
                f"task {self.task_name!r} has no parameter {', '.join(map(repr, unknown))} "
                f"any more (its signature is {self.signature})"
            )
        arguments: dict[str, Any] = {}
        for name in self.parameters:  # in the signature's order, as BoundArguments wants
            if name not in payload:
                continue
            value = payload[name]
            decode = self.converters[name].decode
            if decode is not None and value is not None:
                try:
                    value = decode(value)
                except Exception as exc:  # noqa: BLE001 - a stored value no longer fits its type
                    # The error may quote the value: not a redacted one (it is stored
                    # in the job's error_detail, its events and the worker's log).
                    secret = name in redaction.redacted_names(payload) | self.redact
                    why = type(exc).__name__ if secret else f"{type(exc).__name__}: {exc}"
                    raise ArgumentsDoNotBind(
                        f"task {self.task_name!r}: the stored argument {name!r} does not fit "
                        f"its annotation any more ({why})"
                    ) from None
            kind = self.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                value = tuple(value) if isinstance(value, (list, tuple)) else (value,)
            elif kind is inspect.Parameter.VAR_KEYWORD and not isinstance(value, dict):
                raise ArgumentsDoNotBind(
                    f"task {self.task_name!r}: the stored **{name} is not a JSON object"
                )
            problem = self.argument_problem(name, value)
            if problem is not None:
                # E.g. an int stored before a deploy made the parameter a dataclass.
                raise ArgumentsDoNotBind(
                    f"task {self.task_name!r}: the stored argument {name!r} does not fit "
                    f"its annotation any more: {problem}"
                )
            arguments[name] = value
        if not self._required <= arguments.keys():
            # A parameter added since without a default has no stored value.
            missing = [n for n in self.parameters if n in self._required and n not in arguments]
            raise ArgumentsDoNotBind(
                f"task {self.task_name!r}: the stored arguments do not bind to its "
                f"signature {self.signature}: missing a required argument: {missing[0]!r}"
            )
        bound = inspect.BoundArguments(self.signature, arguments)
        return list(bound.args), dict(bound.kwargs)

    def argument_problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` does not fit parameter ``name``'s annotation, or None
        (``*args``: each item; ``**kwargs``: each value). The value of a
        :attr:`redact` argument is not quoted: the message reaches logs and events."""
        problem = self._argument_problem(name, value)
        if problem is None or name not in self.redact:
            return problem
        # "token must be str, got set {'...'}": everything after "got" may be the secret.
        return problem.split(", got ", 1)[0] + f", got {redaction.REDACTED}"

    def _argument_problem(self, name: str, value: Any) -> str | None:
        hint = self.hints[name]
        kind = self.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL and isinstance(value, (list, tuple)):
            items = enumerate(value)
            return next((p for i, v in items if (p := type_problem(v, hint, f"{name}[{i}]"))), None)
        if kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, Mapping):
            return next(
                (p for k, v in value.items() if (p := type_problem(v, hint, f"{name}[{k!r}]"))),
                None,
            )
        return type_problem(value, hint, name)

    def result_problem(self, value: Any) -> str | None:
        """Why a return value does not fit the return annotation, or None."""
        return type_problem(value, self.result_hint, "the result")

    def named_arguments(self, payload: Any) -> list[tuple[str, Any, bool]] | None:
        """A stored payload as ``(name, value, is_default)`` in the signature's order,
        values as stored (JSON), those of :attr:`redact` as ``[redacted]``; None if it
        is not a mapping of this task's arguments. Parameters the payload leaves out
        show their defaults."""
        if not isinstance(payload, Mapping):
            return None
        named: list[tuple[str, Any, bool]] = []
        for name, parameter in self.parameters.items():
            if name in self.redact and name in payload:
                named.append((name, redaction.REDACTED, False))
            elif name in payload:
                named.append((name, payload[name], False))
            elif parameter.default is not parameter.empty:
                named.append((name, parameter.default, True))
        named += [
            (name, value, False)
            for name, value in payload.items()
            if name not in self.parameters and name != META_KEY
        ]
        return named

    def marked(self, payload: Any) -> Any:
        """A payload given whole (not through ``enqueue``'s arguments) with the task's
        :attr:`redact` names recorded in it, as ``enqueue`` records them."""
        if not isinstance(payload, dict):
            return payload
        return redaction.mark(payload, self.redact.intersection(payload))

    def check_payload(self, payload: Any) -> str | None:
        """Why a stored ``payload`` would not bind, or None (for the drift check)."""
        try:
            self.call_of(payload)
        except ArgumentsDoNotBind as exc:
            return str(exc)
        return None


def _redacted_parameters(
    task_name: str, redact: Iterable[str], parameters: Mapping[str, inspect.Parameter]
) -> frozenset[str]:
    """``redact`` checked against the task's parameters (InvalidInput naming a stranger)."""
    if isinstance(redact, str):
        raise InvalidInput(
            f"task {task_name!r}: redact= takes parameter names, e.g. redact=({redact!r},), "
            f"not the string {redact!r}"
        )
    names = frozenset(redact)
    unknown = sorted(name for name in names if name not in parameters)
    if unknown:
        raise InvalidInput(
            f"task {task_name!r}: redact= names {', '.join(map(repr, unknown))}, which "
            f"is not a parameter of the task (its parameters: {', '.join(parameters) or 'none'})"
        )
    return names


def _short(value: object) -> str:
    return validation.short(value)
