"""The deploy check (issue 24, item 7) on every backend: unfinished jobs whose type no
task or handler knows, and task jobs whose stored arguments no longer bind, listed per
type with counts, before they fail one by one on the workers; finished jobs are not."""

from __future__ import annotations

import dataclasses
import json
import logging

import sqlq_orm
import sqlq_orm.tasks.registry
from sqlq_orm.tasks import ARGUMENTS_DO_NOT_BIND
from sqlq_orm.tasks.drift import find_drift
from tests.acceptance.test_cli import sqlq
from tests.support.tasks_for_tests import registry, send_email


@dataclasses.dataclass
class Order:
    id: int
    qty: int


def seed(queue: sqlq_orm.Queue) -> dict[str, int]:
    return {
        "fits": queue.enqueue(send_email.name, {"to": "a", "subject": "s"}).id,
        "stale": queue.enqueue(send_email.name, {"to": "b"}).id,  # from before subject
        "renamed": queue.enqueue(send_email.name, {"to": "c", "subject": "s", "cc": "d"}).id,
        "unknown": queue.enqueue("mail.send_old", {"to": "e"}).id,
        "plain": queue.enqueue("plain", ["anything"]).id,
    }


def test_drift_lists_jobs_the_registry_cannot_run_as_stored(engine):
    queue = sqlq_orm.Queue(engine)
    ids = seed(queue)
    finished = queue.enqueue("gone_and_done")
    queue.cancel(finished.id)  # finished jobs never run again: not drift

    drift = {d.type: d for d in find_drift(queue, registry)}

    assert set(drift) == {"mail.send", "mail.send_old"}
    assert drift["mail.send_old"].count == 1 and "no handler" in drift["mail.send_old"].problem
    stale = drift["mail.send"]
    assert stale.count == 2
    assert [job_id for job_id, _ in stale.examples] == [ids["stale"], ids["renamed"]]
    assert "missing a required argument: 'subject'" in stale.examples[0][1]
    assert "no parameter 'cc'" in stale.examples[1][1]


def test_a_worker_starting_warns_once_per_task_whose_stored_jobs_no_longer_bind(
    engine, caplog, monkeypatch
):
    queue = sqlq_orm.Queue(engine)
    ids = seed(queue)
    worker = sqlq_orm.Worker(
        queue, registry, queues=["elsewhere"], burst=True, install_signal_handlers=False,
        sweep_interval=None, run_schedules=False,
    )  # fmt: skip

    with caplog.at_level(logging.WARNING, logger="sqlq_orm.tasks"):
        worker.run()

    warnings = [r.getMessage() for r in caplog.records if r.name == "sqlq_orm.tasks"]
    assert len(warnings) == 1, warnings  # the task's drift; not the other worker's type
    assert warnings[0].startswith("task mail.send: 2 unfinished job(s)")
    assert f"job {ids['stale']}: " in warnings[0]
    assert "INVALID_INPUT:ARGUMENTS_DO_NOT_BIND" in warnings[0]

    # Bounded: reading the two oldest (one fits, one does not), one is found.
    monkeypatch.setattr(sqlq_orm.tasks.registry, "DRIFT_CHECK_LIMIT", 2)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sqlq_orm.tasks"):
        registry.worker_starting(queue)
    (bounded,) = [r.getMessage() for r in caplog.records if r.name == "sqlq_orm.tasks"]
    assert "1 unfinished job(s) (of the oldest 2 checked)" in bounded


def test_sqlq_check_handlers_reports_drift_and_exits_1(db_url):
    assert sqlq("--db", db_url, "migrate").returncode == 0
    engine = sqlq_orm.create_engine(db_url)
    seed(sqlq_orm.Queue(engine))
    engine.dispose()
    handlers = "tests.support.tasks_for_tests:registry"

    text = sqlq("--db", db_url, "check", "--handlers", handlers)
    as_json = sqlq("--db", db_url, "check", "--handlers", handlers, "--json")

    assert text.returncode == 1, text.stderr
    assert "mail.send: 2 unfinished job(s): stored arguments do not bind" in text.stdout
    assert "3 unfinished job(s) the handlers cannot run as stored" in text.stdout
    report = json.loads(as_json.stdout)
    assert report["ok"] is False
    assert {d["type"]: d["count"] for d in report["drift"]} == {"mail.send": 2, "mail.send_old": 1}


def test_sqlq_enqueue_with_handlers_checks_the_task_arguments_before_writing(db_url):
    assert sqlq("--db", db_url, "migrate").returncode == 0
    handlers = "tests.support.tasks_for_tests:registry"

    missing = sqlq("--db", db_url, "enqueue", "mail.send", "--payload", '{"to": "a"}',
                   "--handlers", handlers)  # fmt: skip
    unknown = sqlq("--db", db_url, "enqueue", "mail.sned", "--handlers", handlers)
    good = sqlq("--db", db_url, "enqueue", "mail.send", "--payload",
                '{"to": "a", "subject": "s"}', "--handlers", handlers)  # fmt: skip

    assert missing.returncode != 0 and "missing a required argument: 'subject'" in missing.stderr
    assert unknown.returncode != 0 and "no task or handler 'mail.sned'" in unknown.stderr
    assert good.returncode == 0, good.stderr
    engine = sqlq_orm.create_engine(db_url)
    assert sqlq_orm.Queue(engine).counts_by_status()["QUEUED"] == 1  # only the good one
    engine.dispose()


def test_drift_lists_a_parameter_changed_between_int_and_a_dataclass(engine):
    # Issue 34 item 6: an int stored before a deploy made the parameter a dataclass
    # (and the other way round) ran silently, and sqlq check --handlers said nothing.
    queue = sqlq_orm.Queue(engine)
    before, after = sqlq_orm.TaskRegistry(queue), sqlq_orm.TaskRegistry(queue)

    @before.task(name="shop.charge")
    def charge_by_id(order: int) -> None: ...

    @before.task(name="shop.ship")
    def ship_order(order: Order) -> None: ...

    @after.task(name="shop.charge")
    def charge_order(order: Order) -> None: ...

    @after.task(name="shop.ship")
    def ship_by_id(order: int) -> None: ...

    charged = charge_by_id.enqueue(5)
    shipped = ship_order.enqueue(Order(5, 2))

    drift = {d.type: d for d in find_drift(queue, after)}
    assert set(drift) == {"shop.charge", "shop.ship"}
    assert drift["shop.charge"].examples == [
        (charged.id, "task 'shop.charge': the stored argument 'order' does not fit its "
         "annotation any more: order must be Order, got int 5"),
    ]  # fmt: skip
    assert drift["shop.ship"].examples[0][0] == shipped.id
    assert "order must be int, got dict" in drift["shop.ship"].examples[0][1]

    sqlq_orm.Worker(
        queue, after, burst=True, install_signal_handlers=False, sweep_interval=None,
        poll_interval=0.05,
    ).run()  # fmt: skip
    for job in (charged, shipped):
        row = queue.get_job(job.id)
        assert (row.status, row.error_code) == ("FAILED", ARGUMENTS_DO_NOT_BIND)
