"""Pure rules with no database: input validation, error codes, retry backoff, the lease.

- :mod:`~sqlq_orm.core.validation`: checks every value a caller hands the queue and
  raises :class:`~sqlq_orm.errors.InvalidInput` naming it, before anything is written;
- :mod:`~sqlq_orm.core.error_codes`: ``CATEGORY:SUBCATEGORY`` parsing and the codes
  the queue itself records;
- :mod:`~sqlq_orm.core.backoff`: :class:`~sqlq_orm.core.backoff.RetryPolicy` (when a
  failed job runs again);
- :mod:`~sqlq_orm.core.lease`: the :class:`~sqlq_orm.core.lease.Lease` a claim hands out;
- :mod:`~sqlq_orm.core.cron`: cron expressions in a time zone, as epoch-second slots;
- :mod:`~sqlq_orm.core.schedule`: :class:`~sqlq_orm.core.schedule.Schedule` (a
  recurring job declared in code) and which slots a due schedule enqueues.

May import: :mod:`sqlq_orm.errors` and :mod:`sqlq_orm.schema`. Unit-tested without a
database (``tests/unit``).
"""
