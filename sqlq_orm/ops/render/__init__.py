"""How the stats, a job's timeline, prune and maintenance results are shown.

Pure functions over the dataclasses of :mod:`sqlq_orm.ops.stats`,
:mod:`sqlq_orm.ops.timeline` and :mod:`sqlq_orm.ops.retention`; nothing here touches
the database. Three forms: a terminal report (aligned tables; ANSI colour only when
asked), JSON for machines, and the Prometheus text exposition format.

- :mod:`~sqlq_orm.ops.render.text`: shared helpers (colours, times, durations, tables, JSON);
- :mod:`~sqlq_orm.ops.render.stats`: the stats report, as text or JSON;
- :mod:`~sqlq_orm.ops.render.prometheus`: the stats for Prometheus;
- :mod:`~sqlq_orm.ops.render.timeline`: one job's timeline (``sqlq show``);
- :mod:`~sqlq_orm.ops.render.prune`: what prune and maintenance did.

May import: :mod:`sqlq_orm.schema` and the result types of :mod:`sqlq_orm.ops`. Never
the database layers' connections, the queue, the worker or the CLI.
"""

from sqlq_orm.ops.render.prometheus import render_stats_prometheus
from sqlq_orm.ops.render.prune import prune_to_dict, render_maintenance_text, render_prune_text
from sqlq_orm.ops.render.stats import render_stats_json, render_stats_text, stats_to_dict
from sqlq_orm.ops.render.text import human_seconds, table, to_json, utc
from sqlq_orm.ops.render.timeline import (
    render_timeline_json,
    render_timeline_text,
    timeline_to_dict,
)

__all__ = [
    "human_seconds",
    "prune_to_dict",
    "render_maintenance_text",
    "render_prune_text",
    "render_stats_json",
    "render_stats_prometheus",
    "render_stats_text",
    "render_timeline_json",
    "render_timeline_text",
    "stats_to_dict",
    "table",
    "timeline_to_dict",
    "to_json",
    "utc",
]
