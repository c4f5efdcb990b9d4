"""SIGTERM / SIGINT turned into a count the worker's main thread looks at."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType


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
