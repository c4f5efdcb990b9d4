"""Writes are refused without a valid CSRF token, with actions disabled, or unauthorised;
nothing changes in the database when they are. Plain HTTP against the served app."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

import pytest

from sqlq_orm.dashboard.security import CSRF_COOKIE
from sqlq_orm.schema.states import JobStatus
from tests.dashboard.seed import seed
from tests.support.queue_helpers import event_names


class Browserless:
    """urllib with a cookie jar: GET a page, POST a form, read status and body."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def request(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        data = None if form is None else urllib.parse.urlencode(form).encode()
        try:
            with self.opener.open(self.base + path, data=data) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def csrf_token(self, path: str) -> str:
        status, body = self.request(path)
        assert status == 200, body
        found = re.search(r'name="csrf_token" value="([^"]+)"', body)
        assert found, "no CSRF token on " + path
        return found.group(1)

    def cookie(self) -> str | None:
        return next((c.value for c in self.jar if c.name == CSRF_COOKIE), None)


def retry_is_unchanged(queue, job_id: int) -> None:
    assert queue.get_job(job_id).status == JobStatus.FAILED
    assert "RETRIED" not in event_names(queue.context.engine, job_id)


def test_a_confirmed_retry_with_its_token_queues_the_job(serve, queue):
    # The control for the refusals below: the same request with a good token works.
    jobs = seed(queue)
    client = Browserless(serve(enable_actions=True).url)
    token = client.csrf_token(f"/actions/retry?job={jobs.failed}")
    status, body = client.request("/actions/retry", {"csrf_token": token, "job": str(jobs.failed)})
    assert status == 200, body
    assert queue.get_job(jobs.failed).status == JobStatus.QUEUED


def test_pages_cannot_be_framed_by_another_site(serve, queue):
    jobs = seed(queue)
    with urllib.request.urlopen(
        serve(enable_actions=True).url + f"/actions/retry?job={jobs.failed}"
    ) as response:
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Frame-Options"] == "DENY"


def test_a_write_without_the_csrf_token_changes_nothing(serve, queue):
    jobs = seed(queue)
    client = Browserless(serve(enable_actions=True).url)
    client.csrf_token(f"/actions/retry?job={jobs.failed}")  # the browser holds a cookie
    status, body = client.request("/actions/retry", {"job": str(jobs.failed)})
    assert status == 403 and "CSRF token is missing" in body
    retry_is_unchanged(queue, jobs.failed)


def test_a_token_made_for_another_browser_is_refused(serve, queue):
    jobs = seed(queue)
    url = serve(enable_actions=True).url
    victim, attacker = Browserless(url), Browserless(url)
    attacker_token = attacker.csrf_token(f"/actions/retry?job={jobs.failed}")
    victim.csrf_token(f"/actions/retry?job={jobs.failed}")
    assert victim.cookie() != attacker.cookie()
    status, _ = victim.request(
        "/actions/retry", {"csrf_token": attacker_token, "job": str(jobs.failed)}
    )
    assert status == 403
    retry_is_unchanged(queue, jobs.failed)


def test_with_actions_disabled_even_a_valid_write_changes_nothing(serve, queue):
    jobs = seed(queue)
    read_only = serve(enable_actions=False, secret=b"shared")
    writable = serve(enable_actions=True, secret=b"shared")
    # A token and cookie that the writable app (same secret) would accept...
    client = Browserless(writable.url)
    token = client.csrf_token(f"/actions/retry?job={jobs.failed}")
    # ...sent to the read-only one (cookies are per host, not per port).
    client.base = read_only.url
    status, body = client.request("/actions/retry", {"csrf_token": token, "job": str(jobs.failed)})
    assert status == 403 and "actions are disabled" in body
    assert client.request(f"/actions/retry?job={jobs.failed}")[0] == 403
    retry_is_unchanged(queue, jobs.failed)


def test_a_bulk_action_without_any_filter_is_refused(serve, queue):
    jobs = seed(queue)
    client = Browserless(serve(enable_actions=True).url)
    token = client.csrf_token(f"/actions/retry?job={jobs.failed}")
    status, body = client.request("/actions/retry", {"csrf_token": token})
    assert status == 403 and "needs at least one filter" in body
    retry_is_unchanged(queue, jobs.failed)


def test_the_authorize_hook_is_asked_on_every_request(serve, queue):
    jobs = seed(queue)
    asked: list[str] = []

    def nobody(request) -> bool:
        asked.append(request.url.path)
        return False

    client = Browserless(serve(enable_actions=True, authorize=nobody).url)
    for path in ("/", "/jobs", f"/jobs/{jobs.failed}", "/workers", "/metrics"):
        assert client.request(path)[0] == 403, path
    status, _ = client.request("/actions/retry", {"job": str(jobs.failed)})
    assert status == 403
    assert asked == ["/", "/jobs", f"/jobs/{jobs.failed}", "/workers", "/metrics", "/actions/retry"]
    retry_is_unchanged(queue, jobs.failed)


@pytest.mark.parametrize(
    "query, message",
    [
        ("?status=DONE", "status must be one of"),
        ("?id=abc", "id must be a whole number, got &#39;abc&#39;"),
        ("?before=-3", "before must be &gt;= 1, got -3"),
    ],
)
def test_bad_filters_answer_400_naming_the_value(serve, queue, query, message):
    client = Browserless(serve().url)
    status, body = client.request("/jobs" + query)
    assert status == 400 and message in body


def test_an_unknown_job_answers_404(serve, queue):
    status, body = Browserless(serve().url).request("/jobs/999")
    assert status == 404 and "no job with id 999" in body


def test_metrics_are_served_in_the_format_the_scraper_asks_for(serve, queue):
    seed(queue)
    url = serve().url
    with urllib.request.urlopen(url + "/metrics") as response:
        text = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/plain")
    assert 'sqlq_jobs{queue="default",status="FAILED"} 2.0' in text
    assert 'sqlq_failed_jobs_by_error_code{error_code="PAYMENT:CARD_DECLINED"} 2.0' in text
    request = urllib.request.Request(
        url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(request) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.read().decode().rstrip().endswith("# EOF")


def test_the_shared_report_is_reused_until_a_write_drops_it(serve, queue):
    # Every tab reads one report (the overview's counts) until it is refreshed; a
    # write through the dashboard drops it, so the operator sees what was done.
    jobs = seed(queue)
    client = Browserless(serve(enable_actions=True, shared_seconds=3600).url)

    def total() -> str:
        status, body = client.request("/")
        assert status == 200, body
        found = re.search(r'id="total-jobs">([^<]+)<', body)
        assert found
        return found.group(1)

    before = total()
    queue.enqueue("added-behind-its-back")
    assert total() == before  # the shared report, not a new count
    token = client.csrf_token(f"/actions/retry?job={jobs.failed}")
    status, body = client.request("/actions/retry", {"csrf_token": token, "job": str(jobs.failed)})
    assert status == 200, body
    assert int(total().replace(",", "")) == int(before.replace(",", "")) + 1
