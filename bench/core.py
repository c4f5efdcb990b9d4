"""What every bench shares: sizes, databases, side-by-side timing, and result rows.

Numbers on a shared 2-core machine are noisy, so no figure stands alone: each bench
times its subject and a baseline in the same run, interleaved (A, B, A, B, ...), and
reports the medians and their ratio. A ratio survives a noisy neighbour far better
than an absolute rate does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue as queue_module
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy.engine import Engine

import sqlq_orm
from sqlq_orm.schema.models import Base


@dataclass(frozen=True)
class Config:
    """How big and how often: ``full`` for the README, ``quick`` for a look, ``smoke`` for CI."""

    mode: str = "full"  # "full" | "quick" | "smoke"
    workdir: Path = Path("bench/results/work")
    pg_url: str | None = None
    mariadb_url: str | None = None
    repeats: int | None = None

    def size(self, full: int, quick: int, smoke: int) -> int:
        """Pick the size for this mode."""
        return {"full": full, "quick": quick, "smoke": smoke}[self.mode]

    @property
    def reps(self) -> int:
        """Repetitions of each side-by-side measurement (medians are reported)."""
        if self.repeats is not None:
            return self.repeats
        return self.size(full=5, quick=3, smoke=1)

    @property
    def heavy_reps(self) -> int:
        """Repetitions for the benches whose single run takes tens of seconds."""
        return self.repeats if self.repeats is not None else min(self.reps, 3)


@dataclass
class Result:
    """One reported figure, with the baseline it was measured beside."""

    bench: str
    case: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    ratio: float | None = None
    """value / baseline_value, oriented so that higher is better for sqlq_orm."""
    target: str | None = None
    met: bool | None = None
    note: str = ""
    samples: list[float] = field(default_factory=list)
    baseline_samples: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------ timing


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``action`` once; return (seconds, its result)."""
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def side_by_side(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Call each run in turn, ``repeats`` rounds, alternating the order each round.

    Each callable does its own setup and returns the figure it measured (a rate or a
    duration), so setup never leaks into the timing. Alternating A,B / B,A rounds
    spreads slow moments of a shared machine over both sides.
    """
    names = list(runs)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(repeats):
        order = names if round_number % 2 == 0 else list(reversed(names))
        for name in order:
            samples[name].append(runs[name]())
    return samples


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def compare(
    bench: str,
    case: str,
    samples: list[float],
    baseline: str,
    baseline_samples: list[float],
    unit: str,
    *,
    higher_is_better: bool = True,
    target_ratio: float | None = None,
    target_text: str | None = None,
    note: str = "",
) -> Result:
    """A result from two sample lists; the ratio is oriented so >1 means sqlq_orm wins."""
    value, base = median(samples), median(baseline_samples)
    if higher_is_better:
        ratio = value / base if base else float("nan")
    else:
        ratio = base / value if value else float("nan")
    met = None if target_ratio is None else ratio >= target_ratio
    return Result(
        bench=bench,
        case=case,
        value=value,
        unit=unit,
        baseline=baseline,
        baseline_value=base,
        ratio=ratio,
        target=target_text or (f"ratio >= {target_ratio}" if target_ratio is not None else None),
        met=met,
        note=note,
        samples=samples,
        baseline_samples=baseline_samples,
    )


# --------------------------------------------------------------------- databases


def fresh_sqlite_path(config: Config, name: str) -> Path:
    """A path for a new SQLite file under the work directory (old copies removed)."""
    config.workdir.mkdir(parents=True, exist_ok=True)
    path = config.workdir / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def create_schema(url: str) -> Engine:
    """An engine with sqlq_orm's hooks and the schema created from the models."""
    engine = sqlq_orm.create_engine(url)
    Base.metadata.create_all(engine)
    return engine


def fresh_sqlite(config: Config, name: str) -> tuple[Path, Engine]:
    """A new SQLite file (WAL, synchronous=NORMAL via the engine hooks) with the schema."""
    path = fresh_sqlite_path(config, name)
    return path, create_schema(sqlite_url(path))


def _pg_url(url: str) -> sqlalchemy.URL:
    parsed = sqlalchemy.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


@contextlib.contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A throw-away PostgreSQL database next to ``admin_url``'s; dropped afterwards."""
    admin = sqlalchemy.create_engine(_pg_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"sqlq_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def reset_postgres(url: str) -> Engine:
    """Empty a bench database and create the schema again; return a hooked engine."""
    plain = sqlalchemy.create_engine(url)
    with plain.begin() as connection:
        connection.exec_driver_sql("DROP SCHEMA public CASCADE")
        connection.exec_driver_sql("CREATE SCHEMA public")
    plain.dispose()
    return create_schema(url)


def postgres_reachable(url: str | None) -> str | None:
    """None when ``url`` answers; otherwise why not (used to skip PG cases)."""
    if not url:
        return "no --pg URL given"
    try:
        engine = sqlalchemy.create_engine(_pg_url(url))
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any failure means "not available"
        return f"PostgreSQL not reachable ({type(exc).__name__})"
    return None


@contextlib.contextmanager
def mariadb_database(admin_url: str) -> Iterator[str]:
    """A throw-away MariaDB database on ``admin_url``'s server; dropped afterwards."""
    admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"sqlq_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE `{name}`")
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        admin.dispose()


def reset_mariadb(url: str) -> Engine:
    """Empty a MariaDB bench database and create the schema again; return a hooked engine."""
    parsed = sqlalchemy.make_url(url)
    plain = sqlalchemy.create_engine(parsed.set(database=None), isolation_level="AUTOCOMMIT")
    with plain.connect() as connection:
        connection.exec_driver_sql(f"DROP DATABASE IF EXISTS `{parsed.database}`")
        connection.exec_driver_sql(f"CREATE DATABASE `{parsed.database}`")
    plain.dispose()
    return create_schema(url)


def mariadb_reachable(url: str | None) -> str | None:
    """None when ``url`` answers; otherwise why not (used to skip MariaDB cases)."""
    if not url:
        return "no --mariadb URL given"
    try:
        engine = sqlalchemy.create_engine(url)
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any failure means "not available"
        return f"MariaDB not reachable ({type(exc).__name__})"
    return None


@contextlib.contextmanager
def server_databases(config: Config) -> Iterator[dict[str, Callable[[], str]]]:
    """A throw-away database on each server ``--pg`` / ``--mariadb`` name that answers,
    all open at once (so a bench can interleave them), as ``{database: fresh_url}``;
    ``fresh_url()`` empties that database, creates the schema and returns its URL."""
    servers: list[tuple[str, str | None, Any, Any, Any]] = [
        ("postgresql", config.pg_url, postgres_reachable, postgres_database, reset_postgres),
        ("mariadb", config.mariadb_url, mariadb_reachable, mariadb_database, reset_mariadb),
    ]
    with contextlib.ExitStack() as stack:
        fresh_urls: dict[str, Callable[[], str]] = {}
        for database, admin_url, reachable, throwaway, reset in servers:
            if not admin_url or reachable(admin_url) is not None:
                continue
            url = stack.enter_context(throwaway(admin_url))

            def fresh(url: str = url, reset: Any = reset) -> str:
                reset(url).dispose()
                return url

            fresh_urls[database] = fresh
        yield fresh_urls


def on_every_database(
    config: Config, name: str, cases: Callable[[Config, str, Callable[[], str]], list[Result]]
) -> list[Result]:
    """``cases(config, database, fresh_url)`` on SQLite, and on PostgreSQL and MariaDB
    where ``--pg`` / ``--mariadb`` name a server that answers; ``fresh_url()`` hands
    out an empty database with the schema each time it is called."""
    results = cases(config, "sqlite", lambda: sqlite_url(fresh_sqlite(config, name)[0]))
    with server_databases(config) as servers:
        for database, fresh in servers.items():
            results += cases(config, database, fresh)
    return results


def count_rows(engine: Engine, table: str, where: str = "") -> int:
    with engine.connect() as connection:
        sql = f"SELECT count(*) FROM {table}" + (f" WHERE {where}" if where else "")
        return int(connection.exec_driver_sql(sql).scalar_one())


def count_events(engine: Engine) -> int:
    """Events as a job's timeline reads them: those written, plus the CLAIMED and
    STARTED (and, once it succeeded, SUCCEEDED) that a worker's attempt row stands for."""
    derived = "after_event_id IS NOT NULL"
    return (
        count_rows(engine, "sqlq_job_events")
        + 2 * count_rows(engine, "sqlq_job_attempts", derived)
        + count_rows(engine, "sqlq_job_attempts", f"{derived} AND status = 'SUCCEEDED'")
    )


# ------------------------------------------------------------------------ output


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if value != value:  # NaN
        return "n/a"
    if unit == "ms":
        text = f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:,.2f}"
    return f"{text} {unit}".strip()


def format_table(results: list[Result]) -> str:
    """An aligned plain-text table of results."""
    header = ("bench", "case", "sqlq_orm", "baseline", "baseline value", "ratio", "target", "met")
    rows = [header]
    for r in results:
        met = {True: "yes", False: "NO", None: ""}[r.met]
        rows.append(
            (
                r.bench,
                r.case,
                _fmt(r.value, r.unit),
                r.baseline or "",
                _fmt(r.baseline_value, r.unit) if r.baseline else "",
                f"{r.ratio:.2f}" if r.ratio is not None and r.ratio == r.ratio else "",
                r.target or "",
                met,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.rjust(widths[i]) if i in (2, 4, 5) else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [f"  [{r.bench}/{r.case}] {r.note}" for r in results if r.note]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


# ------------------------------------------------------------------- queue work


def drain(
    queue: sqlq_orm.Queue, worker_id: str, *, batch: int = 1, limit: int | None = None
) -> int:
    """Claim (straight into RUNNING) and succeed jobs until none is ready; return how many.

    With ``batch > 1`` and a ``Queue.succeed_many``, a claimed batch is finished in one
    transaction (same token guards); otherwise one ``succeed`` per job.
    """
    done = 0
    succeed_many = getattr(queue, "succeed_many", None) if batch > 1 else None
    while limit is None or done < limit:
        leases = queue.claim(worker_id, limit=batch, start=True)
        if not leases:
            break
        if succeed_many is not None:
            lost = succeed_many(leases)
            assert not lost, f"lost leases while draining: {lost}"
        else:
            for lease in leases:
                queue.succeed(lease)
        done += len(leases)
    return done


def run_children(
    target: Callable[..., None], args: list[tuple[Any, ...]], settle: float
) -> tuple[float, list[Any], list[Any]]:
    """Start one spawned process per ``args`` entry and time them from a common start.

    Each child is called as ``target(*args, go, out)``: it gets ready, waits for
    ``go``, works, and puts one report on ``out``. The clock starts ``settle`` seconds
    after the starts, once imports and connections are done. Returns (seconds, the
    reports, the joined processes); a child that dies without reporting cannot make
    this wait forever.
    """
    context = multiprocessing.get_context("spawn")
    go, out = context.Event(), context.Queue()
    children = [context.Process(target=target, args=(*a, go, out)) for a in args]
    for child in children:
        child.start()
    time.sleep(settle)
    started = time.perf_counter()
    go.set()
    reports: list[Any] = []
    while len(reports) < len(children):
        try:
            reports.append(out.get(timeout=1))
        except queue_module.Empty:
            if all(not child.is_alive() for child in children) and out.empty():
                break
    elapsed = time.perf_counter() - started
    for child in children:
        child.join(timeout=60)
    return elapsed, reports, children
