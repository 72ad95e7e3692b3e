"""The key history dock: the selected key followed through its partition's versions."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QDockWidget

from statelens.app.explore import KeyHistory, iter_key_history
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import KEY_FIELDS, Controller, WindowContext
from statelens.app.session import LoadedCheckpoint, display_time_columns
from statelens.readers.errors import StatelensError
from statelens.viewers.history import KeyHistoryPanel

#: The runner channel of following a key.
CHANNEL = "history"
NO_KEY = "Select a key (state browser or expired keys) to see its history across versions."


class HistoryController(Controller):
    """Follows the selected key when asked (a finding or a browser row picked, Refresh), and again
    when another key is selected while the dock shows."""

    name = "history"
    title = "Key history"

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, KeyHistoryPanel())
        self.history: KeyHistory | None = None
        self._request: tuple[Any, ...] | None = None
        self.dock = QDockWidget(self.title)
        self.dock.setObjectName("historyDock")
        self.dock.setWidget(self.view)
        self.dock.setVisible(False)
        self.view.version_selected.connect(ctx.select_version)
        ctx.key_history_requested.connect(self._on_ctx_key_history_requested)
        # Histories are rebuilt in the new zone (their times are text).
        ctx.time_zone.connect(self._on_time_zone_changed)

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.history = None
        self._request = None
        self.view.clear_history(NO_KEY)

    def on_selection_changed(self, changes: dict[str, Any]) -> None:
        if KEY_FIELDS & set(changes) and self.dock.isVisible() and self.ctx.selection.key is not None:
            self.show_key_history()

    def _on_ctx_key_history_requested(self, changed: Any) -> None:
        # A change of key while the dock shows was followed already (on_selection_changed).
        if changed is None or not (self.dock.isVisible() and KEY_FIELDS & set(changed)):
            self.show_key_history()

    def show_key_history(self) -> int | None:
        """Show the history dock and follow the selected key through its partition's versions.

        Returns
        -------
        int or None
            The job's token, None when no key (or no partition for it) is selected.
        """
        ctx = self.ctx
        s = ctx.selection
        self.dock.setVisible(True)
        self.dock.raise_()
        if ctx.loaded is None or s.key is None or s.operator_id is None or s.store_name is None:
            self.view.clear_history(NO_KEY)
            self.updated.emit()
            return None
        pid = s.key_partition_id if s.key_partition_id is not None else s.partition_id
        if pid is None or pid < 0:
            self.view.clear_history(
                "The selected key's partition is not known: pick a partition in the browser."
            )
            self.updated.emit()
            return None
        try:
            reader = ctx.backends.reader(s.operator_id, s.store_name)
        except StatelensError as err:
            self.view.clear_history(f"Cannot read this store: {err}")
            self.updated.emit()
            return None
        from statelens.app.analysis._common import key_text

        self.view.set_loading(f"Following key {key_text(s.key)} through the versions of partition {pid}…")
        ckpt = ctx.loaded.checkpoint
        time_columns = display_time_columns(ckpt.operator(s.operator_id))
        batch_times = {b: (e.timestamp_ms, e.watermark_ms) for b, e in ckpt.offsets.items()}
        self._request = (reader, pid, s.key, time_columns, batch_times)
        return self._submit()

    def _submit(self) -> int | None:
        if self._request is None:
            return None
        reader, pid, key, time_columns, batch_times = self._request
        starts = [t for t, _wm in batch_times.values() if t is not None]
        zone = self.ctx.time_zone
        return self.ctx.runner.submit(
            CHANNEL,
            iter_key_history,
            reader,
            pid,
            key,
            time_columns,
            batch_times,
            time_text=zone.format_ms,
            zone=zone.label(min(starts) / 1000 if starts else None),
            what="Following the key through its versions",
            on_result=self._on_history_finished,
            on_error=self._on_history_errored,
        )

    def _on_time_zone_changed(self, _utc: bool) -> None:
        if self.history is not None:
            self._submit()

    def _on_history_finished(self, history: KeyHistory) -> None:
        self.history = history
        self.ctx.problems.add_problems(history.problems, where="key history")
        self.view.set_history(
            history.describe(),
            history.headers,
            history.columns,
            history.sort_keys,
            history.row_versions,
            history.changes,
        )
        self.updated.emit()

    def _on_history_errored(self, err: BaseException) -> None:
        self.history = None
        self.view.clear_history(f"Cannot follow this key: {errors.short_message(err)}")
        self.updated.emit()
        if not isinstance(err, StatelensError):
            errors.show_error(err, title="Key history failed")
