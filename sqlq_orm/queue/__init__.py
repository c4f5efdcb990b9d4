"""The queue layer: every operation on jobs, leases and workers (the only SQL writers).

:class:`~sqlq_orm.queue.queue.Queue` puts the operation groups together: enqueue,
claiming, calls under a lease, failures, the sweeper, administration by id and the
worker registry, each a module of its own over :class:`~sqlq_orm.queue.core.QueueCore`.
An asynchronous queue belongs here too, sharing the statements in :mod:`sqlq_orm.db`.

May import: :mod:`sqlq_orm.errors`, :mod:`sqlq_orm.schema`, :mod:`sqlq_orm.core`,
:mod:`sqlq_orm.db`, :mod:`sqlq_orm.ops`. Never the worker or the CLI.
"""
