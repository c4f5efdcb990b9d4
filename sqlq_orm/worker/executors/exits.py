"""How a child process ended, in words an operator can act on."""

from __future__ import annotations

import os
import signal


def describe_exit(status: int) -> str:
    """``killed by SIGSEGV``, ``killed by SIGKILL (possibly the OOM killer)`` or
    ``exited with status 3``: a :func:`os.waitpid` status as a job's error detail."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGKILL:
            return f"killed by {name} (possibly the OOM killer)"
        return f"killed by {name}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"ended with wait status {status}"
