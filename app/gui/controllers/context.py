"""What the tab controllers share, and the one way they reach the window.

:class:`WindowContext` holds the checkpoint shown, the shared selection and time zone, the runner, the
problems panel, the backends and the decoded-state cache, and turns views' intent (a store, a batch, a
key picked) into selection changes. :class:`DeferredJobs` starts a view's job when the view is shown or
the app is idle. :class:`Controller` is the base of every tab's controller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from PySide6.QtCore import QObject, QSettings, QTimer, Signal
from PySide6.QtWidgets import QWidget

from statelens.app.analysis.views import VIEWS, View
from statelens.app.gui.controllers.backends import BackendsController
from statelens.app.gui.controllers.catalog import StoreCatalog, in_order
from statelens.app.gui.errors import ProblemsPanel
from statelens.app.session import LoadedCheckpoint, SelectionState, StoreRole
from statelens.readers.cache import StateCache
from statelens.readers.errors import StatelensError, UsageError
from statelens.viewers.browser import store_label
from statelens.viewers.timefmt import TimeZoneState

SETTINGS_UTC = "times_in_utc"
#: Heaviest keys listed for the selected store (growth view, and the verdicts' growth run).
TOP_KEYS_SHOWN = 25


class DeferredJobs:
    """Jobs that wait for their view: started at once when the view is showing, else when it is first
    shown or nothing else runs, so the view in front gets the cores (two, on many laptops) instead of
    sharing them with every other view's analysis. The overview's verdicts (on the runner channel
    ``summary``), the growth, expired, browser and SQL views wait so; the others' jobs run on the runner
    channel named after their view.

    Parameters
    ----------
    runner : app.gui.workers.JobRunner
    current_view : callable
        The name of the view showing.
    order : sequence of str
        Views in tab order (hidden views are filled in this order).
    """

    def __init__(self, runner: Any, current_view: Callable[[], str], order: Sequence[str]) -> None:
        self.runner = runner
        self.current_view = current_view
        self.order = tuple(order)
        self.jobs: dict[str, Callable[[], None]] = {}
        #: No more jobs for hidden views until they are shown (``--screenshot`` is done; Cancel).
        self.paused = False

    def when_shown(self, channel: str, start: Callable[[], None]) -> None:
        """Run ``start`` (which submits the job of view ``channel``) now if that view is showing;
        otherwise when the view is first shown or the app is idle. A newer request replaces a waiting one."""
        if self.current_view() == channel:
            self.jobs.pop(channel, None)
            start()
            return
        self.jobs[channel] = start
        if self.runner.idle and not self.paused:
            QTimer.singleShot(0, self.start_next)

    def take(self, channel: str) -> bool:
        """Forget the job waiting for ``channel`` (its answer came another way); True if one waited."""
        return self.jobs.pop(channel, None) is not None

    def start_next(self) -> None:
        """Fill the next hidden view (in tab order) when nothing else runs."""
        if not self.jobs or not self.runner.idle or self.paused or self.runner.is_shut_down:
            return
        channel = min(self.jobs, key=self.order.index)
        self.jobs.pop(channel)()

    def on_idle_changed(self, idle: bool) -> None:
        if idle and self.jobs and not self.paused:
            # Nothing else runs: fill the next hidden view, so switching to it later is instant.
            QTimer.singleShot(0, self.start_next)

    def on_view_shown(self, name: str) -> None:
        start = self.jobs.pop(name, None)
        if start is not None:
            start()

    def clear(self) -> None:
        """Forget every waiting job and start filling hidden views again (a new checkpoint)."""
        self.jobs = {}
        self.paused = False

    def hold(self) -> None:
        """Start no more jobs for hidden views until they are shown (``--screenshot`` is done; Cancel)."""
        self.paused = True

    def settled(self) -> bool:
        """True when no job runs and none waits to start in the background (hidden views are filled,
        or held after Cancel)."""
        return bool(self.runner.idle) and (self.paused or not self.jobs)

    def pending(self) -> list[str]:
        """Views whose job waits, in tab order."""
        return [v for v in self.order if v in self.jobs]


class WindowContext(QObject):
    """The narrow interface between the window and its tab controllers.

    Parameters
    ----------
    runner : app.gui.workers.JobRunner
    settings : QSettings
        The app's settings (backend, time zone, export folder).
    storage_options : dict
        fsspec storage options of every checkpoint opened but the bundled sample.
    current_view : callable
        The name of the view showing.
    order : sequence of str
        The views, in tab order.
    window : QWidget
        The window (parent of this context and of dialogs).

    Attributes
    ----------
    selection : SelectionState
    time_zone : TimeZoneState
        Local time (the default) or UTC for the checkpoint's own times, in every view.
    problems : app.gui.errors.ProblemsPanel
        Where per-file problems of background reads are listed.
    backends : BackendsController
    deferred : DeferredJobs

    Signals
    -------
    status_changed(str text)
        A line for the status bar.
    key_history_requested(object changed)
        Follow the selected key through its versions; ``changed`` is the set of selection fields just
        changed (the history then follows by itself when showing), or None to follow in any case.
    """

    status_changed = Signal(str)
    key_history_requested = Signal(object)

    def __init__(
        self,
        runner: Any,
        settings: QSettings,
        storage_options: dict[str, Any],
        current_view: Callable[[], str],
        order: Sequence[str],
        window: QWidget,
    ) -> None:
        super().__init__(window)
        self.runner = runner
        self.settings = settings
        self.storage_options = storage_options
        self.selection = SelectionState()
        self.time_zone = TimeZoneState(_setting_bool(settings.value(SETTINGS_UTC, False)))
        self.problems = ProblemsPanel()
        self.backends = BackendsController(settings, runner, window)
        self.deferred = DeferredJobs(runner, current_view, order)
        self.cache = StateCache()  # decoded state versions, shared with the command line
        #: Event logs, driver logs or progress dumps shown on the timeline and in the verdicts.
        self.event_logs: list[str] = []
        self.loaded: LoadedCheckpoint | None = None
        self.roles: dict[tuple[int, str], StoreRole] = {}
        #: The stores of the checkpoint shown, and the orders the pickers list them in.
        self.catalog = StoreCatalog()
        #: Stores the native reader decodes, by rows (:meth:`StoreCatalog.by_rows`).
        self.stores: list[tuple[Any, Any]] = []
        #: The user (or the command line) picked the store: views keep it rather than a default.
        self.store_chosen = False

    def set_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.loaded = loaded
        self.roles = loaded.store_roles()
        decodable = loaded.decodable_stores()
        self.catalog = StoreCatalog.of(loaded, self.store_groups(), decodable)
        rank = {k: i for i, k in enumerate(self.catalog.by_rows())}
        self.stores = sorted(decodable, key=lambda item: rank[(item[0].operator_id, item[1].store_name)])

    def select_first_store(self, previous: dict[str, Any], reloading: bool) -> bool:
        """Select the store the checkpoint just shown opens on: the one selected before a reload (F5),
        else its default store at its latest version. False when there is none to select."""
        assert self.loaded is not None
        self.selection.reset()
        opening = self.catalog.opening(previous, reloading, self.loaded.default_store())
        if opening is None:
            return False
        self.selection.update(**opening)
        return True

    def open_readers(self) -> None:
        """Make the store readers here, on the GUI thread (jobs only use them); list those that fail."""
        for op, s in self.stores:
            try:
                self.backends.reader(op.operator_id, s.store_name)
            except StatelensError as err:
                self.problems.add_problems([err], where="opening store")

    def set_times_in_utc(self, utc: bool, remember: bool = True) -> None:
        """Show the checkpoint's times in UTC (True) or local time; views and controllers re-render
        through :attr:`time_zone`. ``remember`` keeps the choice for the next start."""
        if remember:
            self.settings.setValue(SETTINGS_UTC, utc)
        self.time_zone.set_utc(utc)

    def status(self, text: str) -> None:
        self.status_changed.emit(text)

    # -- stores ----------------------------------------------------------------------------------------
    def store_item(self, op: Any, store: Any) -> tuple[int, str, str]:
        """``(operator_id, store_name, label)`` of a store picker item (labelled with what it holds)."""
        return (
            op.operator_id,
            store.store_name,
            store_label(op, store, self.roles.get((op.operator_id, store.store_name))),
        )

    def store_items(self, order: Sequence[tuple[int, str]]) -> list[tuple[int, str, str]]:
        """Picker items of every store, in ``order`` (a :class:`StoreCatalog` order)."""
        ckpt = self.loaded.checkpoint if self.loaded is not None else None
        items = [self.store_item(op, s) for op in ckpt.operators for s in op.stores] if ckpt else []
        return in_order(items, order)

    def store_groups(self) -> dict[tuple[int, str], str]:
        """Picker groups: a transformWithState operator's state variables, then its internal families."""
        if self.loaded is None:
            return {}
        kinds = {op.operator_id: op.kind.value for op in self.loaded.checkpoint.operators}
        return {
            key: f"operator {key[0]} · {kinds[key[0]]}: {role.group}"
            for key, role in self.roles.items()
            if role.group is not None
        }

    def store_tips(self) -> dict[tuple[int, str], str]:
        """Picker tooltips: what each store holds."""
        return {key: role.description for key, role in self.roles.items()}

    def store_exists(self, operator_id: int | None, store_name: str | None) -> bool:
        """Whether the native reader decodes this store of the checkpoint shown."""
        if self.loaded is None or operator_id is None:
            return False
        return any(
            op.operator_id == operator_id and s.store_name == store_name
            for op, s in self.loaded.decodable_stores()
        )

    # -- views' intent, as selection changes -----------------------------------------------------------
    def select_batch(self, batch_id: int) -> None:
        self.selection.select_batch(batch_id)

    def select_store(self, operator_id: int, store_name: str) -> None:
        self.store_chosen = True
        if (operator_id, store_name) == (self.selection.operator_id, self.selection.store_name):
            return
        version = self.selection.version
        if self.loaded is not None:
            version = self.catalog.version_on_switch(
                (operator_id, store_name), version, self.selection.batch_id is not None
            )
        self.selection.update(
            operator_id=operator_id,
            store_name=store_name,
            partition_id=None,
            version=version,
            key=None,
            key_partition_id=None,
        )

    def select_partition(self, partition_id: int | None) -> None:
        self.selection.update(partition_id=partition_id)

    def select_version(self, version: int) -> None:
        self.selection.update(version=version, batch_id=version - 1 if version > 0 else None)

    def select_key(self, partition_id: int, key: Any) -> None:
        self.selection.update(key=key, key_partition_id=partition_id if partition_id >= 0 else None)

    def target(
        self,
        *,
        operator_id: int | None = None,
        store_name: str | None = None,
        version: int | None = None,
        partition_id: int | None = None,
        key: Any = None,
        batch_id: int | None = None,
    ) -> dict[str, Any]:
        """The selection change that shows a store, version, partition, key or batch (``open_at``).

        The store defaults to the operator's only one (or ``default``); the version to the store's
        latest (or ``batch_id + 1``). Raises :class:`~readers.errors.UsageError` for an unknown
        operator or store, naming the ones there are.
        """
        change: dict[str, Any] = {}
        if operator_id is not None or store_name is not None:
            if self.loaded is None:
                raise UsageError("no checkpoint is open")
            ckpt = self.loaded.checkpoint
            if operator_id is None:
                owners = [
                    op.operator_id
                    for op in ckpt.operators
                    if any(s.store_name == store_name for s in op.stores)
                ]
                if not owners:
                    raise UsageError(f"no operator has a store {store_name!r}")
                operator_id = owners[0]
            op = ckpt.operator(operator_id)
            names = [s.store_name for s in op.stores]
            if store_name is None:
                store_name = names[0] if len(names) == 1 or "default" not in names else "default"
            if store_name not in names:
                raise UsageError(
                    f"operator {operator_id} has no store {store_name!r}; its stores: {', '.join(names)}"
                )
            versions = op.store(store_name).versions
            if version is None:
                version = batch_id + 1 if batch_id is not None else (versions[-1] if versions else None)
            change.update(
                operator_id=operator_id,
                store_name=store_name,
                partition_id=partition_id,
                version=version,
                key=None,
                key_partition_id=None,
            )
            self.store_chosen = True
        elif version is not None or partition_id is not None:
            change.update(partition_id=partition_id)
            if version is not None:
                change["version"] = version
        if batch_id is not None:
            change["batch_id"] = batch_id
        elif change.get("version") is not None:
            change["batch_id"] = change["version"] - 1 if change["version"] > 0 else None
        if key is not None:
            change.update(key=key, key_partition_id=partition_id)
        return change


class Controller(QObject):
    """One tab's behaviour: what it loads, what its actions do, the state its jobs leave.

    Parameters
    ----------
    ctx : WindowContext
    view : QWidget
        The tab's view (from :mod:`viewers`), owned by the controller.

    Signals
    -------
    updated()
        The view shows new results (or a message why it cannot).
    """

    updated = Signal()
    #: The view's name (``statelens gui --view``, a key of :data:`app.analysis.views.VIEWS`).
    name = ""

    @property
    def title(self) -> str:
        """The tab's title (:attr:`app.analysis.views.View.title`)."""
        return VIEWS[self.name].title

    def __init__(self, ctx: WindowContext, view: Any) -> None:
        super().__init__(ctx)
        self.ctx = ctx
        self.view = view

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        """Forget the previous checkpoint and fill the view from ``loaded`` (no reads yet)."""

    def start(self, loaded: LoadedCheckpoint) -> None:
        """Start (or schedule) the view's jobs on ``loaded``, once the selection is set."""

    def refresh(self, loaded: LoadedCheckpoint) -> None:
        """Show ``loaded``, the checkpoint shown grown by new batches (follow mode), keeping what the
        user picked; :meth:`start` runs after. By default the view is filled again
        (:meth:`show_checkpoint`)."""
        self.show_checkpoint(loaded)

    def cancel(self) -> None:
        """The user cancelled every job (Esc): say so where it matters."""

    def show_store(self, operator_id: int, store_name: str) -> None:
        """Show this store (``open_at``), when the view has a store picker."""

    def on_selection_changed(self, changes: dict[str, Any]) -> None:
        """The shared selection changed (``changes``: the fields changed), when the view follows it."""

    def main_table(self) -> Any:
        """The table File › Export table writes when this view shows (None: none)."""
        return None

    def main_plot(self) -> Any:
        """The graphics File › Export plot writes when this view shows (None: none)."""
        return None

    def export_job(self, table: Any, source: Any, out: str, fmt: str) -> tuple[Any, ...] | None:
        """A job writing one of this view's tables better than as the text shown (typed rows, findings as
        JSON), or None."""
        return None


def controller_class(view: View) -> type[Controller]:
    """The controller class of ``view``: :attr:`View.controller` in ``app.gui.controllers.<name>``.

    Parameters
    ----------
    view : app.analysis.views.View

    Returns
    -------
    type
        A :class:`Controller` whose ``name`` is the view's.
    """
    cls = getattr(import_module(f"{__package__}.{view.name}"), view.controller, None)
    if not (isinstance(cls, type) and issubclass(cls, Controller) and cls.name == view.name):
        raise TypeError(f"{view.controller} is not the controller of view {view.name!r}")
    return cls


def _setting_bool(value: Any) -> bool:
    """A QSettings boolean (INI files hand back ``"true"``/``"false"``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)
