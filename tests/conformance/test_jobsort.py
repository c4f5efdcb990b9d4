"""The jobs list in other orders: every order pages every job once, a bounded order
sorts its window and keeps it, oldest first pages by the key, and no plan scans the
jobs table in full."""

from __future__ import annotations

import pytest

from sqlq_orm.errors import InvalidInput
from sqlq_orm.ops import jobsort
from sqlq_orm.ops.joblist import JobFilter
from sqlq_orm.ops.jobsort import SORT_KEYS, JobSort, SortCursor, list_sorted_jobs


def _walk(queue, job_sort, job_filter=None, limit=2):
    """Every page of one order, as ids; the window and cursor passed on as a page gives them."""
    seen, after, window = [], None, None
    for _ in range(20):  # a cursor that repeats a page must fail, not loop
        page = list_sorted_jobs(
            queue, job_filter, job_sort, after=after, window=window, limit=limit
        )
        seen.extend(j.id for j in page.jobs)
        if page.next_after is None:
            return seen
        after, window = page.next_after, page.window
    return seen


def _fill(queue, clock):
    """Seven jobs with tied priorities, run times, attempts and finish times."""
    priorities = [1, 0, 1, 2, 0, 1, 2]
    ids = [
        queue.enqueue("email", priority=p, delay=60 * (n % 3)).id for n, p in enumerate(priorities)
    ]
    # Two finish, a minute apart, at two attempts and one: a tie for attempts with the
    # unfinished ones, and finish times to sort.
    for _ in range(2):
        [lease] = queue.claim("w-1", start=True)
        queue.succeed(lease)
        clock.advance(60)
    return ids


def test_every_order_pages_every_job_once_in_key_then_id_order(queue, clock):
    _fill(queue, clock)
    jobs = {j.id: j for j in list_sorted_jobs(queue, limit=50).jobs}

    for key in SORT_KEYS:
        for descending in (True, False):
            job_sort = JobSort(key, descending)
            expected = sorted(
                jobs, key=lambda i: (job_sort.value_of(jobs[i]), i), reverse=descending
            )

            assert _walk(queue, job_sort) == expected, (key, descending)


def test_an_unfinished_job_sorts_after_the_finished_ones_both_ways(queue, clock):
    _fill(queue, clock)
    for descending in (True, False):
        page = list_sorted_jobs(queue, job_sort=JobSort("finished_at", descending))

        finished = [j.finished_at is not None for j in page.jobs]

        assert finished == [True, True] + [False] * 5


def test_a_bounded_order_sorts_the_newest_ids_and_keeps_its_window_across_pages(queue, monkeypatch):
    monkeypatch.setattr(jobsort, "SORT_WINDOW", 4)
    old = [queue.enqueue("email", priority=9).id for _ in range(3)]
    newest = [queue.enqueue("email", priority=n).id for n in range(4)]
    first = list_sorted_jobs(queue, job_sort=JobSort("priority"), limit=2)
    assert first.window == newest[0]
    late = queue.enqueue("email", priority=-1).id  # enqueued while the operator pages

    second = list_sorted_jobs(
        queue, job_sort=JobSort("priority"), after=first.next_after, window=first.window, limit=9
    )

    assert [j.id for j in first.jobs] == [newest[3], newest[2]]
    assert [j.id for j in second.jobs] == [newest[1], newest[0], late]
    assert not set(old) & {j.id for j in first.jobs + second.jobs}


def test_oldest_first_pages_up_the_key_and_stops_at_its_scan_budget(queue, monkeypatch):
    monkeypatch.setattr(jobsort, "SCAN_CHUNK", 3)
    for _ in range(5):
        queue.enqueue("common")
    rare = queue.enqueue("rare").id
    oldest_first = JobSort("id", descending=False)

    first = list_sorted_jobs(queue, JobFilter(type="rare"), oldest_first, scan_chunks=1)
    second = list_sorted_jobs(
        queue, JobFilter(type="rare"), oldest_first, after=first.next_after, scan_chunks=1
    )

    assert first.jobs == [] and first.stopped_early
    assert first.next_after == SortCursor(rare - 3, rare - 3)
    assert [j.id for j in second.jobs] == [rare] and second.next_after is None


def test_bad_orders_and_cursors_are_refused_naming_the_value(queue):
    with pytest.raises(InvalidInput, match="sort must be one of .* got 'created'"):
        JobSort("created")
    with pytest.raises(InvalidInput, match="after must be a sort value and an id .* got '7'"):
        SortCursor.parse("7")
    with pytest.raises(InvalidInput, match="after must be a job id from 1 to"):
        SortCursor.parse(f"1:{2**63}")


def test_the_sorted_pages_never_scan_the_jobs_table_in_full(queue, db_url):
    from tests.conformance.test_explain import _full_scans

    if db_url.startswith("mysql"):
        pytest.skip("reads SQLite's and PostgreSQL's EXPLAIN output; MariaDB's is not parsed")
    queue.enqueue_many([{"type": "resize"}] * 20)
    named = []
    for key in SORT_KEYS[1:]:
        for job_filter in (JobFilter(), JobFilter(status="FAILED"), JobFilter(type="resize")):
            where = job_filter.conditions(queue.tables)
            for after in (None, SortCursor(5, 5)):
                statement = jobsort._window_page(queue.tables, where, JobSort(key), 3, after, 50)
                named.append((f"{key}[{job_filter}, {after}]", statement))

    assert _full_scans(queue.engine, named) == {}
