"""The database layer: engines and their hooks, backends, the clock, prebuilt statements.

- :mod:`~sqlq_orm.db.engine`: ``create_engine`` / ``configure_engine`` (connect-time
  PRAGMAs on SQLite, session settings on PostgreSQL);
- :mod:`~sqlq_orm.db.backends`: one module per database behind a registry keyed by
  SQLAlchemy's dialect name; every dialect difference lives there;
- :mod:`~sqlq_orm.db.clock`: "now" as SQL (the database's clock, or a pinned one);
- :mod:`~sqlq_orm.db.statements`: every statement the queue runs, built once per queue;
- :mod:`~sqlq_orm.db.tables`: the tables of one set of models (the library's or an app's);
- :mod:`~sqlq_orm.db.context`: :class:`~sqlq_orm.db.context.QueueContext`, which ties
  those together and opens the read, write and snapshot transactions;
- :mod:`~sqlq_orm.db.maintenance`: foreign-key suspension and migration locks.

May import: :mod:`sqlq_orm.errors`, :mod:`sqlq_orm.schema`, :mod:`sqlq_orm.core`.
A new database is a new module in ``backends/`` (as MariaDB/MySQL's ``mysql.py``).
"""
