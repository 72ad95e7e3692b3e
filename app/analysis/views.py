"""The desktop app's views, registered in one list: their names (``statelens gui --view``, the verdicts'
links), tab titles, what they show and the jobs whose results they draw. The window builds its tabs, View
menu (Ctrl+1...), controllers and job channels from :data:`VIEWS`; the command line and the analyses name
views from it without importing Qt. Adding a view is one :class:`View` here, its controller in
``app/gui/controllers/<name>.py`` and its view in ``viewers/``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    """One view of the desktop app (a tab of the main window).

    Parameters
    ----------
    name : str
        Its name (``statelens gui --view``); its controller is in ``app/gui/controllers/<name>.py``.
    title : str
        The tab's title, and its entry in the View menu.
    what : str
        What it shows (``statelens gui --help``).
    controller : str
        Its controller's class, in ``app.gui.controllers.<name>``.
    jobs : tuple of str
        Runner channels of the jobs whose results it shows (``--screenshot`` waits for them once the
        checkpoint is loaded; opening another checkpoint cancels them).
    """

    name: str
    title: str
    what: str
    controller: str
    jobs: tuple[str, ...] = ()


#: View name -> :class:`View`, in tab order (Ctrl+1 is the first).
VIEWS = {
    v.name: v
    for v in (
        View(
            "overview",
            "Overview",
            "the verdicts, then the checkpoint's batches, operators, health checks and unreadable files",
            "OverviewController",
            ("summary",),
        ),
        View(
            "timeline",
            "Batch timeline",
            "batch start times, intervals and the watermark (durations and rates with --event-log)",
            "TimelineController",
            ("eventlog",),
        ),
        View(
            "growth",
            "State growth",
            "rows and bytes per store over versions, per partition, and the heaviest keys",
            "GrowthController",
            ("growth", "heavy"),
        ),
        View(
            "expired",
            "Expired keys",
            "keys expired but still in the state (zombies, overdue, stale, eviction lag)",
            "ExpiredController",
            ("expired",),
        ),
        View(
            "browser",
            "State browser",
            "the rows of one store at one version, a partition, a key and its history",
            "BrowserController",
            ("browser", "order", "page"),
        ),
        View("sql", "SQL", "SQL over the state (DuckDB, or Spark)", "SqlController", ("sql", "sqltables")),
        View(
            "schema",
            "Schema and conf",
            "schema files and the session conf over batches",
            "SchemaController",
            ("schema",),
        ),
    )
}
