"""What the mixins accept as the host's base: SQLAlchemy declarative classes only.

SQLModel (and any pydantic model) builds a pydantic schema from every annotation of a
class, and the mixins' ``Mapped[...]`` columns have none: ``class Job(JobMixin,
SQLModel, table=True)`` failed deep inside pydantic with an error that named neither
the mixin nor the fix. The fix is a ``DeclarativeBase`` sharing ``SQLModel.metadata``
(see ``docs/howto/sqlmodel.md``); this says so as the class is defined.
"""

from __future__ import annotations

from typing import Any

from sqlq_orm.errors import InvalidInput


class DeclarativeOnly:
    """Base of the mixins: refuses a subclass that is also a pydantic model."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        pydantic = [
            base.__name__
            for base in cls.__mro__
            if base.__module__.split(".")[0] in ("pydantic", "sqlmodel")
        ]
        if pydantic:
            mixin = next(b.__name__ for b in cls.__mro__ if b.__module__.startswith("sqlq_orm."))
            raise InvalidInput(
                f"class {cls.__name__}({mixin}, ...) also derives from {pydantic[0]}: the "
                f"sqlq_orm mixins are SQLAlchemy declarative mixins, not SQLModel or pydantic "
                f"fields. Bind them to a DeclarativeBase that shares SQLModel's metadata: "
                f"class QueueBase(DeclarativeBase): metadata = SQLModel.metadata; then "
                f"class {cls.__name__}({mixin}, QueueBase) (see docs/howto/sqlmodel.md)"
            )
