"""What the key history remembers and decides, without Qt: which key it follows and when
(rendered by :mod:`app.gui.controllers.history`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis._common import key_text
from statelens.app.explore import KeyHistory
from statelens.app.session import LoadedCheckpoint, SelectionState, display_time_columns

#: Selection fields that pick another key (the key history follows them).
KEY_FIELDS = frozenset({"key", "key_partition_id", "operator_id", "store_name"})
#: What the key history says while no key is selected.
NO_KEY = "Select a key (state browser or expired keys) to see its history across versions."
#: What it says when the selected key's partition is not known.
NO_PARTITION = "The selected key's partition is not known: pick a partition in the browser."


@dataclass(frozen=True)
class HistoryRequest:
    """The key followed: where, and what the history needs of the checkpoint to show its times.

    Parameters
    ----------
    operator_id : int
    store_name : str
    partition_id : int
        The key's partition.
    key : JsonObject
    time_columns : tuple
        ``app.session.display_time_columns`` of the operator.
    batch_times : mapping
        ``batch id -> (batch timestamp ms, watermark ms)`` of the offsets files.
    reader : object
        The store's reader (``BackendsController.reader``); None until it is opened.
    """

    operator_id: int
    store_name: str
    partition_id: int
    key: Any
    time_columns: tuple[Any, ...] = ()
    batch_times: Mapping[int, tuple[int | None, int | None]] = field(default_factory=dict)
    reader: Any = None

    @property
    def loading_text(self) -> str:
        """What the history says while the key is followed."""
        return f"Following key {key_text(self.key)} through the versions of partition {self.partition_id}…"

    @property
    def first_start_s(self) -> float | None:
        """The first batch's start in epoch seconds (the time zone's label is that day's), or None."""
        starts = [t for t, _wm in self.batch_times.values() if t is not None]
        return min(starts) / 1000 if starts else None


@dataclass
class HistoryState:
    """What the key history remembers: the key followed and its history shown.

    Attributes
    ----------
    request : HistoryRequest or None
        The key followed last (followed again in another time zone).
    history : app.explore.KeyHistory or None
        The history shown (None: none yet, or following the key failed).
    """

    request: HistoryRequest | None = None
    history: KeyHistory | None = None

    def reset(self) -> None:
        """Forget the previous checkpoint's key."""
        self.request = None
        self.history = None

    @staticmethod
    def follows_change(changes: Collection[str], shown: bool, key: Any) -> bool:
        """Whether a selection change is followed at once: it picks another key while the history shows.

        Parameters
        ----------
        changes : collection of str
            The selection fields changed.
        shown : bool
            Whether the history dock shows.
        key : JsonObject or None
            The selected key.

        Returns
        -------
        bool
        """
        return bool(KEY_FIELDS & set(changes)) and shown and key is not None

    @staticmethod
    def follows_request(changed: Collection[str] | None, shown: bool) -> bool:
        """Whether the history is asked for by a finding or a browser row picked (``changed``: the
        selection fields it changed; None: Refresh), unless that change was followed already
        (:meth:`follows_change`).

        Parameters
        ----------
        changed : collection of str or None
        shown : bool

        Returns
        -------
        bool
        """
        return changed is None or not (shown and bool(KEY_FIELDS & set(changed)))

    @staticmethod
    def to_follow(selection: SelectionState, loaded: LoadedCheckpoint | None) -> HistoryRequest | str:
        """The key to follow: the selected one, in its own partition (else the partition selected), or
        the message saying why none is.

        Parameters
        ----------
        selection : SelectionState
        loaded : LoadedCheckpoint or None
            The checkpoint shown.

        Returns
        -------
        HistoryRequest or str
            Without its reader.
        """
        s = selection
        if loaded is None or s.key is None or s.operator_id is None or s.store_name is None:
            return NO_KEY
        pid = s.key_partition_id if s.key_partition_id is not None else s.partition_id
        if pid is None or pid < 0:
            return NO_PARTITION
        ckpt = loaded.checkpoint
        return HistoryRequest(
            s.operator_id,
            s.store_name,
            pid,
            s.key,
            display_time_columns(ckpt.operator(s.operator_id)),
            {b: (e.timestamp_ms, e.watermark_ms) for b, e in ckpt.offsets.items()},
        )
