"""The schema: job states and their transitions, the declarative mixins, the default models.

- :mod:`~sqlq_orm.schema.states`: ``JobStatus``, ``AttemptStatus``, ``Event`` and the
  table of allowed transitions;
- :mod:`~sqlq_orm.schema.mixins`: ``JobMixin``, ``JobAttemptMixin``, ``JobEventMixin``,
  ``WorkerMixin``, ``ScheduleMixin`` and ``JobDependencyMixin``, which a host app binds
  to its own declarative
  base (and extends with its own columns); constraint and index names come from here;
- :mod:`~sqlq_orm.schema.models`: the library's own base and concrete models, used
  when the app does not bring its own.

May import: :mod:`sqlq_orm.errors` only. Everything else builds on this layer.
"""
