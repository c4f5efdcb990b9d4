"""Stored jobs against the code that will run them: the deploy check.

Jobs enqueued before a deploy may not fit the code after it: their type may have no
task or handler any more (a renamed task without ``name=``), or their arguments may
no longer bind to the task's new signature. :func:`find_drift` lists both, per type
with counts and a few example ids, before the jobs fail one by one on the workers
(``sqlq check --handlers myapp.jobs:registry``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlq_orm.db.context import HasContext, QueueContext
from sqlq_orm.ops.drift import unfinished_payloads, unfinished_types
from sqlq_orm.worker.handlers import HandlerRegistry

EXAMPLES = 5
"""Job ids (and reasons) kept per type as examples."""


@dataclass
class Drift:
    """Unfinished jobs of one type that the code cannot run as stored."""

    type: str
    count: int
    problem: str
    """``no handler``, or ``arguments do not bind``."""
    examples: list[tuple[int, str]] = field(default_factory=list)
    """Up to :data:`EXAMPLES` ``(job id, why)``."""

    def __str__(self) -> str:
        lines = [f"{self.type}: {self.count} unfinished job(s): {self.problem}"]
        lines += [f"  job {job_id}: {why}" for job_id, why in self.examples]
        return "\n".join(lines)


def find_drift(
    target: QueueContext | HasContext,
    registry: HandlerRegistry,
    *,
    limit: int | None = None,
    tasks_only: bool = False,
) -> list[Drift]:
    """Every type of unfinished job ``registry`` has no handler for, and every task
    whose unfinished jobs' arguments do not bind to its signature; by type.

    ``limit`` bounds the payloads read per task (the oldest unfinished jobs first):
    then a count says how many of those did not bind. ``tasks_only`` leaves out the
    types with no handler (another worker's, as far as one worker can tell).
    """
    found: list[Drift] = []
    # A TaskRegistry's tasks (read by name: the registry imports this module).
    tasks: dict[str, Any] = getattr(registry, "tasks", None) or {}
    for job_type, count in sorted(unfinished_types(target).items()):
        if job_type not in registry:
            if not tasks_only:
                known = ", ".join(registry.types) or "none"
                found.append(Drift(job_type, count, f"no handler or task (known: {known})"))
            continue
        task = tasks.get(job_type)
        if task is None:
            continue  # a plain handler: its payload is its own business
        drift = Drift(job_type, 0, "stored arguments do not bind to the task's signature")
        payloads = unfinished_payloads(target, job_type, **({"batch": limit} if limit else {}))
        for checked, (job_id, text) in enumerate(payloads):
            if limit is not None and checked >= limit:
                break
            try:
                payload = None if text is None else json.loads(text)
            except ValueError:
                why: str | None = "the payload is not JSON"
            else:
                why = task.signature.check_payload(payload)
            if why is not None:
                drift.count += 1
                if len(drift.examples) < EXAMPLES:
                    drift.examples.append((job_id, why))
        if drift.count:
            found.append(drift)
    return found
