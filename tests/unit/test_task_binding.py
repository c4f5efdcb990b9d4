"""Task arguments (issue 24, items 1-2): a call is bound against the function's
signature before anything is written, stored as JSON by parameter name, and turned
back into the same call on the worker; dataclass, TypedDict and pydantic arguments
round-trip by their annotation. No database: the queue is never reached."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import json
import math
from typing import Any, TypedDict

import pydantic
import pytest

from sqlq_orm import AsyncJobContext, InvalidInput, JobContext, JobError, TaskRegistry
from sqlq_orm.tasks import ARGUMENTS_DO_NOT_BIND, ArgumentsDoNotBind, TaskSignature
from sqlq_orm.tasks.failures import FailurePolicy, error_code_of
from sqlq_orm.tasks.registry import default_task_name


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Route:
    name: str
    stops: list[Point]
    home: Point | None = None


class Flags(TypedDict):
    loud: bool


class Customer(pydantic.BaseModel):
    id: int
    email: str


def roundtrip(function: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments the worker's call binds to, after a trip through JSON."""
    signature = TaskSignature(function, "t")
    payload = json.loads(json.dumps(signature.payload_of(signature.arguments_of(args, kwargs))))
    call_args, call_kwargs = signature.call_of(payload)
    return dict(inspect.signature(function).bind(*call_args, **call_kwargs).arguments)


def plot(route: Route, flags: Flags, customer: Customer, corners: tuple[Point, ...] = ()) -> None:
    pass


def test_dataclass_typeddict_and_pydantic_arguments_come_back_as_they_went_in():
    route = Route("r", [Point(1, 2), Point(3, 4)], home=Point(0, 0))
    customer = Customer(id=7, email="a@example.com")

    arguments = roundtrip(plot, route, {"loud": True}, customer, corners=(Point(5, 6),))

    assert arguments == {
        "route": route,
        "flags": {"loud": True},
        "customer": customer,
        "corners": (Point(5, 6),),
    }


def test_the_payload_is_plain_json_by_parameter_name_without_defaults():
    signature = TaskSignature(plot, "t")
    payload = signature.payload_of(
        signature.arguments_of(
            (Route("r", [Point(1, 2)]), {"loud": False}, Customer(id=1, email="e")), {}
        )
    )
    assert payload == {
        "route": {"name": "r", "stops": [{"x": 1, "y": 2}], "home": None},
        "flags": {"loud": False},
        "customer": {"id": 1, "email": "e"},
    }


def test_positional_only_varargs_and_varkwargs_round_trip():
    def spread(a: int, /, b: int, *rest: int, c: int = 0, **extra: str) -> None:
        pass

    assert roundtrip(spread, 1, 2, 3, 4, c=5, d="x") == {
        "a": 1, "b": 2, "rest": (3, 4), "c": 5, "extra": {"d": "x"},
    }  # fmt: skip


@pytest.mark.parametrize(
    "args, kwargs, named",
    [
        ((), {}, "missing a required argument: 'to'"),
        (("a",), {"cc": "b"}, "unexpected keyword argument 'cc'"),
        (("a", 1, 2), {}, "too many positional arguments"),
        (("a",), {"to": "b"}, "multiple values for argument 'to'"),
    ],
)
def test_a_call_that_does_not_bind_is_refused_naming_the_argument(args, kwargs, named):
    def send(to: str, retries: int = 1) -> None:
        pass

    signature = TaskSignature(send, "send")
    with pytest.raises(InvalidInput, match="nothing was written") as refused:
        signature.arguments_of(args, kwargs)
    assert named in str(refused.value)


@pytest.mark.parametrize(
    "value, problem",
    [
        (object(), "object is not a JSON type"),
        ({"when": datetime.date(2026, 1, 1)}, "date is not a JSON type (at ['when'])"),
        ([1, {2: "a"}], "it has the key 2 (at [1])"),
        (math.nan, "nan is not a finite number"),
        ({1, 2}, "set is not a JSON type"),
    ],
)
def test_a_non_json_argument_is_refused_naming_it_and_where_inside(value, problem):
    def store(item: Any) -> None:
        pass

    signature = TaskSignature(store, "store")
    with pytest.raises(InvalidInput) as refused:
        signature.payload_of(signature.arguments_of((value,), {}))
    assert "argument 'item'" in str(refused.value)
    assert problem in str(refused.value)


def test_a_set_annotated_as_such_round_trips():
    def tag(tags: frozenset[str]) -> None:
        pass

    assert roundtrip(tag, frozenset({"a", "b"})) == {"tags": frozenset({"a", "b"})}


def test_stored_arguments_that_no_longer_bind_say_why():
    def send(to: str, subject: str) -> None:  # a deploy added subject, dropped cc
        pass

    signature = TaskSignature(send, "send")
    with pytest.raises(ArgumentsDoNotBind, match="no parameter 'cc'"):
        signature.call_of({"to": "a", "subject": "s", "cc": "b"})
    with pytest.raises(ArgumentsDoNotBind, match="missing a required argument: 'subject'"):
        signature.call_of({"to": "a"})
    with pytest.raises(ArgumentsDoNotBind, match="JSON object"):
        signature.call_of(["a"])
    assert signature.check_payload({"to": "a", "subject": "s"}) is None


def test_a_stored_dataclass_that_no_longer_fits_its_class_does_not_bind():
    def draw(point: Point) -> None:
        pass

    with pytest.raises(ArgumentsDoNotBind, match="'point' does not fit"):
        TaskSignature(draw, "draw").call_of({"point": {"x": 1, "z": 2}})


def test_the_leading_context_is_not_an_argument_and_must_come_first():
    def with_context(ctx: JobContext, to: str) -> None:
        pass

    async def with_async_context(ctx: AsyncJobContext, to: str) -> None:
        pass

    def context_later(to: str, ctx: JobContext) -> None:
        pass

    assert TaskSignature(with_context, "t").context == "ctx"
    assert list(TaskSignature(with_async_context, "t").parameters) == ["to"]
    with pytest.raises(InvalidInput, match="'ctx' must come first"):
        TaskSignature(context_later, "t")


def test_the_runner_fails_a_job_whose_arguments_do_not_bind_without_retry():
    registry = TaskRegistry()

    @registry.task()
    def send(to: str) -> None:
        pass

    context = JobContext(
        job_id=1, attempt=1, type=send.name, queue="default", payload={"too": "a"},
        payload_ref=None, worker_id="w", retries_left=3, lease_seconds=30, leased_at=0.0,
        shutdown=__import__("threading").Event(),
    )  # fmt: skip
    with pytest.raises(JobError) as failed:
        registry.get(send.name)(context)  # type: ignore[misc]
    assert failed.value.code == ARGUMENTS_DO_NOT_BIND
    assert failed.value.retryable is False


def test_the_type_name_is_the_import_path_unless_named():
    registry = TaskRegistry()

    @registry.task()
    def send(to: str) -> None:
        pass

    @registry.task(name="mail.send")
    def renamed(to: str) -> None:
        pass

    here = test_the_type_name_is_the_import_path_unless_named.__qualname__
    assert send.name == f"{__name__}.{here}.<locals>.send"
    assert renamed.name == "mail.send"
    assert set(registry.types) == {send.name, "mail.send"}
    assert registry.get_task("mail.send") is not None


def test_a_task_in_the_script_being_run_needs_a_name():
    def job() -> None:
        pass

    job.__module__ = "__main__"
    with pytest.raises(InvalidInput, match="pass name="):
        default_task_name(job)


def test_enqueue_without_a_bound_queue_says_how_to_bind_one():
    registry = TaskRegistry()

    @registry.task()
    def send(to: str) -> None:
        pass

    with pytest.raises(Exception, match=r"TaskRegistry\(queue\) or call registry.bind"):
        send.enqueue("a")


def test_a_bad_call_is_refused_before_the_queue_is_looked_at():
    registry = TaskRegistry()  # no queue: reaching it would raise another error

    @registry.task()
    def send(to: str) -> None:
        pass

    with pytest.raises(InvalidInput, match="missing a required argument"):
        send.enqueue()  # type: ignore[call-arg]
    with pytest.raises(InvalidInput, match="call #1: .*unexpected keyword argument 'too'"):
        send.enqueue_many([{"to": "a"}, {"to": "b", "too": "c"}])


def test_key_functions_get_the_task_arguments():
    registry = TaskRegistry()

    @registry.task(dedupe_key=lambda to, subject="": f"welcome-{to}", concurrency_key="smtp")
    def send(to: str, subject: str = "") -> None:
        pass

    spec = send.options(priority=4, queue="mail").spec("a@example.com")
    assert (spec.dedupe_key, spec.concurrency_key) == ("welcome-a@example.com", "smtp")
    assert (spec.priority, spec.queue, spec.type) == (4, "mail", send.name)
    assert send.spec("b").priority == 0  # options() made a copy


@pytest.mark.parametrize(
    "exc, code",
    [
        (KeyError("k"), "EXCEPTION:KEY_ERROR"),
        (type("HTTPError", (Exception,), {})(), "EXCEPTION:HTTP_ERROR"),
        (type("_9lives", (Exception,), {})(), "EXCEPTION:E_9LIVES"),
        (type("X" * 200, (Exception,), {})(), "EXCEPTION:" + "X" * 90),
    ],
)
def test_an_exceptions_error_code_is_its_class_name(exc, code):
    assert error_code_of(exc) == code


def test_retry_on_and_no_retry_on_decide_what_is_retried():
    policy = FailurePolicy(retry_on=(OSError,), no_retry_on=(FileNotFoundError,))
    assert policy.retryable(OSError()) and not policy.retryable(FileNotFoundError())
    assert not policy.retryable(ValueError())
    with pytest.raises(InvalidInput, match="retry_on takes exception classes"):
        TaskRegistry().task(retry_on="ValueError")  # type: ignore[arg-type]
