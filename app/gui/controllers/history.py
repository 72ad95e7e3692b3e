"""The key history dock: the selected key followed through its partition's versions."""

from __future__ import annotations

import dataclasses
from typing import Any

from PySide6.QtWidgets import QDockWidget

from statelens.app.explore import KeyHistory, iter_key_history
from statelens.app.gui import errors
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.app.gui.controllers.history_state import NO_KEY, HistoryState
from statelens.app.session import LoadedCheckpoint
from statelens.readers.errors import StatelensError
from statelens.viewers.history import KeyHistoryPanel

#: The runner channel of following a key.
CHANNEL = "history"


class HistoryController(Controller):
    """Follows the selected key when asked (a finding or a browser row picked, Refresh), and again
    when another key is selected while the dock shows."""

    name = "history"
    title = "Key history"

    def __init__(self, ctx: WindowContext) -> None:
        super().__init__(ctx, KeyHistoryPanel())
        #: The key followed and its history shown.
        self.state = HistoryState()
        self.dock = QDockWidget(self.title)
        self.dock.setObjectName("historyDock")
        self.dock.setWidget(self.view)
        self.dock.setVisible(False)
        self.view.version_selected.connect(ctx.select_version)
        ctx.key_history_requested.connect(self._on_ctx_key_history_requested)
        # Histories are rebuilt in the new zone (their times are text).
        ctx.time_zone.connect(self._on_time_zone_changed)

    @property
    def history(self) -> KeyHistory | None:
        """The history shown (None: none yet, or following the key failed)."""
        return self.state.history

    def show_checkpoint(self, loaded: LoadedCheckpoint) -> None:
        self.state.reset()
        self.view.clear_history(NO_KEY)

    def refresh(self, loaded: LoadedCheckpoint) -> None:
        """The key followed is followed again through the new versions when the dock shows it."""
        if self.dock.isVisible() and self.ctx.selection.key is not None and self.state.history is not None:
            self.show_key_history()
        else:
            self.show_checkpoint(loaded)

    def on_selection_changed(self, changes: dict[str, Any]) -> None:
        if self.state.follows_change(changes, self.dock.isVisible(), self.ctx.selection.key):
            self.show_key_history()

    def _on_ctx_key_history_requested(self, changed: Any) -> None:
        # A change of key while the dock shows was followed already (on_selection_changed).
        if self.state.follows_request(changed, self.dock.isVisible()):
            self.show_key_history()

    def show_key_history(self) -> int | None:
        """Show the history dock and follow the selected key through its partition's versions.

        Returns
        -------
        int or None
            The job's token, None when no key (or no partition for it) is selected.
        """
        ctx = self.ctx
        self.dock.setVisible(True)
        self.dock.raise_()
        request = self.state.to_follow(ctx.selection, ctx.loaded)
        if isinstance(request, str):
            self.view.clear_history(request)
            self.updated.emit()
            return None
        try:
            reader = ctx.backends.reader(request.operator_id, request.store_name)
        except StatelensError as err:
            self.view.clear_history(f"Cannot read this store: {err}")
            self.updated.emit()
            return None
        self.view.set_loading(request.loading_text)
        self.state.request = dataclasses.replace(request, reader=reader)
        return self._submit()

    def _submit(self) -> int | None:
        request = self.state.request
        if request is None:
            return None
        zone = self.ctx.time_zone
        return self.ctx.runner.submit(
            CHANNEL,
            iter_key_history,
            request.reader,
            request.partition_id,
            request.key,
            request.time_columns,
            dict(request.batch_times),
            time_text=zone.format_ms,
            zone=zone.label(request.first_start_s),
            what="Following the key through its versions",
            on_result=self._on_history_finished,
            on_error=self._on_history_errored,
        )

    def _on_time_zone_changed(self, _utc: bool) -> None:
        if self.state.history is not None:
            self._submit()

    def _on_history_finished(self, history: KeyHistory) -> None:
        self.state.history = history
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
        self.state.history = None
        self.view.clear_history(f"Cannot follow this key: {errors.short_message(err)}")
        self.updated.emit()
        if not isinstance(err, StatelensError):
            errors.show_error(err, title="Key history failed")
