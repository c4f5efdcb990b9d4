"""Stop requests: SIGTERM / SIGINT and :meth:`Worker.request_stop`, and waits that heed them."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("sqlq_orm.worker")

_SIGNAL_POLL = 0.1  # how often waits in the main thread look for a received signal


class SignalCounter:
    """Counts SIGTERM and SIGINT while installed; the worker polls :attr:`received`.

    The handler only bumps a counter: taking a lock (or setting an Event) in a signal
    handler could deadlock on a lock the interrupted main thread holds.
    """

    def __init__(self) -> None:
        self.received = 0  # only ever incremented by the signal handler

    def install(self) -> Callable[[], None]:
        """Install the handlers (main thread only); return what puts the old ones back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.received += 1

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore


class StopRequests:
    """What a worker was asked to stop doing, by a signal or by a call. Thread-safe.

    ``stopping``: stop claiming. ``immediate``: skip the grace period. ``shutdown``:
    seen by handlers as ``shutdown_requested``. ``wake``: a slot was freed or a stop
    was asked for (the claim loop waits on it). ``jobs_ready``: jobs may have arrived
    (a wake-up) or a stop was asked for (an idle worker waits on it). One signal asks
    for a graceful stop, a second one for an immediate stop.
    """

    def __init__(self, grace_period: float) -> None:
        self.grace_period = grace_period
        self.stopping = threading.Event()
        self.immediate = threading.Event()
        self.shutdown = threading.Event()
        self.wake = threading.Event()
        self.jobs_ready = threading.Event()
        self.signals = SignalCounter()

    def request(self, *, immediate: bool = False) -> None:
        """Stop claiming and shut down (gracefully unless ``immediate``)."""
        if immediate:
            self.immediate.set()
        self.stopping.set()
        self.shutdown.set()
        self.wake.set()
        self.jobs_ready.set()

    def poll_signals(self) -> bool:
        """Turn received signals into stop requests; return whether to stop claiming."""
        received = self.signals.received
        if received >= 1 and not self.stopping.is_set():
            log.info(
                "signal received: finishing running jobs (up to %.0fs), then releasing "
                "the rest; send it again to stop now",
                self.grace_period,
            )
            self.request()
        if received >= 2 and not self.immediate.is_set():
            log.info("second signal: stopping now")
            self.request(immediate=True)
        return self.stopping.is_set()

    def wait(self, event: threading.Event, timeout: float) -> None:
        """Wait for ``event`` up to ``timeout``, noticing signals within a tenth of a second.

        A received signal sets ``stopping`` and ``wake``, which ends the wait.
        """
        deadline = time.monotonic() + timeout
        while not event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.signals.received:
                self.poll_signals()
            event.wait(min(left, _SIGNAL_POLL))
