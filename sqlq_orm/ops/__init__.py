"""Operating a queue: what an operator reads and runs beside the workers.

- :mod:`~sqlq_orm.ops.stats`: the stats (``sqlq stats``, :meth:`Queue.stats()
  <sqlq_orm.Queue.stats>`), read in one snapshot;
- :mod:`~sqlq_orm.ops.timeline`: one job with its attempts, events and worker
  (``sqlq show``, :func:`sqlq_orm.job_timeline`);
- :mod:`~sqlq_orm.ops.retention`: the retention policy, batched pruning and the
  database's own upkeep (``sqlq prune``, ``sqlq maintenance``);
- :mod:`~sqlq_orm.ops.invariants`: the read-only invariant checker (``sqlq check``);
- :mod:`~sqlq_orm.ops.render`: how all of the above is shown (text, JSON, Prometheus).

Everything here takes a :class:`~sqlq_orm.db.context.QueueContext` or anything that
carries one (a :class:`~sqlq_orm.Queue` does), resolved with
:func:`~sqlq_orm.db.context.context_of`.

May import: :mod:`sqlq_orm.errors`, :mod:`sqlq_orm.schema`, :mod:`sqlq_orm.core`,
:mod:`sqlq_orm.db`. Never :mod:`sqlq_orm.queue`, the worker or the CLI: the
:class:`~sqlq_orm.Queue` facade imports this package for its ``stats()`` and
``prune()`` pass-throughs, so imports point one way only (queue -> ops -> db).
"""
