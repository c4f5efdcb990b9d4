"""The gate in front of every page: Host allow-list (DNS rebinding), forwarded requests on
the loopback default, cross-site writes, and a form body capped while it is read.

Plain HTTP (``http.client``, so the headers are exactly the ones a test sets) against
the dashboard served by uvicorn, plus one DNS-rebinding check in a real chromium.
"""

from __future__ import annotations

import http.client
import re
import socket
import urllib.parse

import pytest

from sqlq_orm.dashboard import create_app
from sqlq_orm.dashboard.actions import MAX_FORM_BYTES
from sqlq_orm.dashboard.security import CSRF_COOKIE, HostAllowList, host_name
from sqlq_orm.errors import InvalidInput
from sqlq_orm.schema.states import JobStatus
from tests.dashboard.seed import seed
from tests.dashboard.test_writes import retry_is_unchanged


class Raw:
    """One HTTP exchange with exactly the headers given (Host included)."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "", parsed.port or 80
        self.netloc = f"{self.host}:{self.port}"

    def request(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> tuple[int, str, http.client.HTTPMessage]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            headers = {k.replace("_", "-"): v for k, v in headers.items()}
            headers.setdefault("Host", self.netloc)
            if body is not None:
                headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
                headers.setdefault("Content-Length", str(len(body)))
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, response.read().decode(), response.headers
        finally:
            connection.close()

    def form(self, job_id: int) -> tuple[str, str]:
        """A CSRF cookie and its token, from the confirm page of a retry."""
        status, body, headers = self.request("GET", f"/actions/retry?job={job_id}")
        assert status == 200, body
        cookie = re.search(CSRF_COOKIE + r"=([^;]+)", headers["set-cookie"])
        token = re.search(r'name="csrf_token" value="([^"]+)"', body)
        assert cookie and token
        return cookie.group(1), token.group(1)

    def retry(self, job_id: int, **headers: str) -> tuple[int, str]:
        cookie, token = self.form(job_id)
        body = urllib.parse.urlencode({"csrf_token": token, "job": str(job_id)}).encode()
        status, text, _ = self.request(
            "POST", "/actions/retry", body, Cookie=f"{CSRF_COOKIE}={cookie}", **headers
        )
        return status, text


def test_a_host_name_not_on_the_allow_list_is_refused(serve, queue):
    jobs = seed(queue)
    raw = Raw(serve(enable_actions=True).url)
    for allowed in (raw.netloc, f"localhost:{raw.port}", f"[::1]:{raw.port}", "127.0.0.1"):
        assert raw.request("GET", "/", Host=allowed)[0] == 200, allowed
    # What a DNS-rebinding page's requests carry: its own name, now pointing here.
    for hostile in (f"evil.example:{raw.port}", "evil.example", "127.0.0.1.evil.example", ""):
        status, body, _ = raw.request("GET", f"/jobs/{jobs.failed}", Host=hostile)
        assert status == 400 and "does not answer for the host name" in body, hostile
        assert "charge_card" not in body
    cookie, token = raw.form(jobs.failed)
    form = urllib.parse.urlencode({"csrf_token": token, "job": str(jobs.failed)}).encode()
    status, _, _ = raw.request(
        "POST", "/actions/retry", form, Host="evil.example", Cookie=f"{CSRF_COOKIE}={cookie}"
    )
    assert status == 400
    retry_is_unchanged(queue, jobs.failed)


def test_the_allow_list_is_configurable(serve, queue):
    seed(queue)
    raw = Raw(serve(allowed_hosts=["jobs.example.com", ".ops.example"]).url)
    assert raw.request("GET", "/", Host="jobs.example.com:443")[0] == 200
    assert raw.request("GET", "/", Host="JOBS.example.com")[0] == 200
    assert raw.request("GET", "/", Host="a.ops.example")[0] == 200
    assert raw.request("GET", "/", Host="ops.example")[0] == 200
    assert raw.request("GET", "/", Host="xops.example")[0] == 400
    assert raw.request("GET", "/", Host=raw.netloc)[0] == 400  # no longer in the list
    anyone = Raw(serve(allowed_hosts=["*"]).url)
    assert anyone.request("GET", "/", Host="whatever.example")[0] == 200


def test_bad_allowed_hosts_are_named():
    with pytest.raises(InvalidInput, match="list of host names, got 'localhost'"):
        HostAllowList("localhost")
    with pytest.raises(InvalidInput, match="must be host names, got ''"):
        HostAllowList(["ok.example", ""])
    assert host_name("[::1]:8080") == "::1" and host_name("Box:80") == "box"
    assert host_name("::1") == "::1"


def test_the_loopback_default_refuses_requests_a_proxy_forwarded(serve, queue):
    seed(queue)
    raw = Raw(serve().url)
    assert raw.request("GET", "/")[0] == 200
    for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):
        status, body, _ = raw.request("GET", "/", **{header: "203.0.113.9"})
        assert status == 403 and "not authorised" in body, header
    # A host's own hook decides for itself (here: it trusts its proxy).
    hooked = Raw(serve(authorize=lambda request: True).url)
    assert hooked.request("GET", "/", X_Forwarded_For="203.0.113.9")[0] == 200


@pytest.mark.parametrize(
    "headers, why",
    [
        ({"Sec-Fetch-Site": "cross-site"}, "sent from another site (cross-site)"),
        ({"Sec-Fetch-Site": "same-site"}, "sent from another site (same-site)"),
        ({"Origin": "http://evil.example"}, "from another origin"),
        ({"Origin": "null"}, "from another origin"),
    ],
)
def test_a_cross_site_write_is_refused_even_with_a_valid_token(serve, queue, headers, why):
    jobs = seed(queue)
    raw = Raw(serve(enable_actions=True).url)
    status, body = raw.retry(jobs.failed, **headers)
    assert status == 403 and why in body
    retry_is_unchanged(queue, jobs.failed)


def test_a_same_origin_write_goes_through(serve, queue):
    # The control for the refusals above: the same POST as a browser sends it from the page.
    jobs = seed(queue)
    raw = Raw(serve(enable_actions=True).url)
    status, body = raw.retry(
        jobs.failed, Origin=f"http://{raw.netloc}", Sec_Fetch_Site="same-origin"
    )
    assert status in (200, 303), body
    assert queue.get_job(jobs.failed).status == JobStatus.QUEUED


def test_an_oversized_form_is_refused_before_it_is_read(serve, queue):
    jobs = seed(queue)
    raw = Raw(serve(enable_actions=True).url)
    cookie, token = raw.form(jobs.failed)
    # Declares 50 MB and sends a few bytes: the answer comes at once, without the rest.
    with socket.create_connection((raw.host, raw.port), timeout=10) as sock:
        sock.sendall(
            (
                f"POST /actions/retry HTTP/1.1\r\nHost: {raw.netloc}\r\n"
                f"Cookie: {CSRF_COOKIE}={cookie}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {50 * 1024 * 1024}\r\n\r\ncsrf_token={token}&job="
            ).encode()
        )
        answer = sock.recv(65536).decode(errors="replace")  # times out if it waits for 50 MB
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    # Chunked (no declared length): reading stops at the first chunk past the cap.
    with socket.create_connection((raw.host, raw.port), timeout=10) as sock:
        sock.sendall(
            (
                f"POST /actions/retry HTTP/1.1\r\nHost: {raw.netloc}\r\n"
                f"Cookie: {CSRF_COOKIE}={cookie}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
            ).encode()
        )
        chunk = b"x" * (MAX_FORM_BYTES + 1)
        sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        answer = sock.recv(65536).decode(errors="replace")  # never sends the last chunk
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    retry_is_unchanged(queue, jobs.failed)


@pytest.mark.browser
def test_a_dns_rebinding_page_cannot_read_the_dashboard(serve, queue, browser, chromium_path):
    # A second chromium that resolves evil.test to 127.0.0.1, as a rebinding attacker's
    # DNS would: the page at evil.test is then same-origin with whatever answers there.
    jobs = seed(queue)
    raw = Raw(serve().url)
    rebound = browser.browser_type.launch(
        executable_path=chromium_path,
        headless=True,
        args=["--host-resolver-rules=MAP evil.test 127.0.0.1"],
    )
    try:
        page = rebound.new_page()
        response = page.goto(f"http://evil.test:{raw.port}/jobs/{jobs.failed}")
        assert response is not None and response.status == 400
        assert "charge_card" not in page.content()
        response = page.goto(f"http://127.0.0.1:{raw.port}/jobs/{jobs.failed}")
        assert response is not None and response.status == 200  # the control
    finally:
        rebound.close()


def test_create_app_refuses_a_bare_string_for_allowed_hosts(queue):
    with pytest.raises(InvalidInput, match="allowed_hosts"):
        create_app(queue, allowed_hosts="localhost")  # type: ignore[arg-type]
