"""Flask-SQLAlchemy makes the engine; the README's recipe gives it sqlq's hooks.

``db.engine`` exists once ``db.init_app(app)`` has run, before anything connects:
``sqlq_orm.configure_engine(db.engine)`` there installs the hooks for every
connection. A queue handed an engine that has never connected installs them itself,
without a warning (no connection missed them); one handed an engine already used warns.
"""

from __future__ import annotations

import warnings

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import text
from sqlalchemy.orm import DeclarativeBase

import sqlq_orm
from sqlq_orm.schema.models import Base as SqlqBase


class Base(DeclarativeBase):
    pass


def make_app(url: str) -> tuple[Flask, SQLAlchemy]:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url
    db = SQLAlchemy(model_class=Base)
    db.init_app(app)
    return app, db


def test_the_recipe_configures_db_engine_before_first_use(tmp_path):
    app, db = make_app(f"sqlite:///{tmp_path / 'app.db'}")
    with app.app_context():
        sqlq_orm.configure_engine(db.engine)  # the recipe: right after init_app
        SqlqBase.metadata.create_all(db.engine)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            queue = sqlq_orm.Queue(db.engine)

        job = queue.enqueue("send_email", session=db.session)
        db.session.commit()

        assert db.session.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert queue.get_job(job.id).status == "QUEUED"


def test_a_queue_on_a_db_engine_never_used_installs_the_hooks_without_a_warning(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    sqlq_engine = sqlq_orm.create_engine(url)
    sqlq_orm.migrate.upgrade(sqlq_engine)
    sqlq_engine.dispose()
    app, db = make_app(url)
    with app.app_context():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            queue = sqlq_orm.Queue(db.engine)

        queue.enqueue("send_email", session=db.session)
        db.session.commit()
        assert db.session.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_a_queue_on_an_engine_the_app_already_used_still_warns(tmp_path):
    app, db = make_app(f"sqlite:///{tmp_path / 'app.db'}")
    with app.app_context():
        SqlqBase.metadata.create_all(db.engine)  # connected without the hooks

        with pytest.warns(sqlq_orm.SqlqWarning, match="configure_engine"):
            sqlq_orm.Queue(db.engine)
