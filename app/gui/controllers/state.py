"""What the tab controllers remember and decide, without Qt.

Each controller holds one of these plain objects and renders it into its view; the decisions that need
no widget (which store a picker lists first, where a verdict's link leads, which key the history follows,
what the browser reads next, which store's keys to weigh, the SQL tab's status line) are methods here,
tested without a ``QApplication`` (``tests/test_gui_state.py``). The shared selection (store, version,
partition, key) is :class:`app.session.SelectionState`.

The store catalog every picker orders comes first, then one section per tab.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis._common import key_text
from statelens.app.analysis.expired import ExpiredFinding
from statelens.app.analysis.growth import StoreGrowth
from statelens.app.analysis.sql import SqlTable
from statelens.app.analysis.summary import UNREADABLE_CHECKS, Summary, Verdict
from statelens.app.analysis.timeline import ProgressSeries
from statelens.app.explore import ExpiredOverview, KeyHistory, SchemaVersion, order_stores
from statelens.app.session import (
    LoadedCheckpoint,
    SelectionState,
    StateTable,
    StoreRole,
    display_time_columns,
)
from statelens.readers.errors import StatelensError
from statelens.readers.model import OperatorInfo, StoreInfo

#: ``(operator_id, store_name)``.
StoreKey = tuple[int, str]


@dataclass(frozen=True)
class StoreCatalog:
    """The stores of the checkpoint shown, and the orders the store pickers list them in.

    Parameters
    ----------
    keys : tuple of StoreKey
        Every store, in the checkpoint's order.
    sizes : mapping
        Bytes of each store's state files: how much it holds, without reading any state.
    rows_sides : frozenset of StoreKey
        Stores holding a join's buffered rows (``keyWithIndexToValue``), ranked before the stores that
        only index them.
    groups : mapping
        Picker group of a store (a transformWithState operator's state variables, its internal
        families); a group's stores stay together.
    decodable : frozenset of StoreKey
        Stores the native readers decode.
    versions : mapping
        Each store's versions, oldest first.
    """

    keys: tuple[StoreKey, ...] = ()
    sizes: Mapping[StoreKey, int] = field(default_factory=dict)
    rows_sides: frozenset[StoreKey] = frozenset()
    groups: Mapping[StoreKey, str] = field(default_factory=dict)
    decodable: frozenset[StoreKey] = frozenset()
    versions: Mapping[StoreKey, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        loaded: LoadedCheckpoint,
        groups: Mapping[StoreKey, str],
        decodable: Sequence[tuple[OperatorInfo, StoreInfo]],
    ) -> StoreCatalog:
        """The catalog of an opened checkpoint (lists its state files; reads no state).

        Parameters
        ----------
        loaded : LoadedCheckpoint
        groups : mapping
            Picker groups (``WindowContext.store_groups``).
        decodable : sequence of (OperatorInfo, StoreInfo)
            ``loaded.decodable_stores()``.

        Returns
        -------
        StoreCatalog
        """
        return cls(
            keys=tuple(
                (op.operator_id, s.store_name) for op in loaded.checkpoint.operators for s in op.stores
            ),
            sizes=loaded.store_sizes(),
            rows_sides=loaded.rows_sides(),
            groups=dict(groups),
            decodable=frozenset((op.operator_id, s.store_name) for op, s in decodable),
            versions={
                (op.operator_id, s.store_name): tuple(s.versions)
                for op in loaded.checkpoint.operators
                for s in op.stores
            },
        )

    def by_rows(self) -> list[StoreKey]:
        """Every store by rows, largest first (a join's ``keyWithIndexToValue`` sides first): the order
        of the browser's and growth view's pickers; the browser opens on the first decodable one.

        Returns
        -------
        list of StoreKey
        """
        return order_stores(self.keys, {}, self.sizes, self.groups, self.rows_sides)

    def by_findings(self, findings: Mapping[StoreKey, int]) -> list[StoreKey]:
        """Every store, those with the most ``findings`` first, then the others by rows (the expired
        view's picker).

        Parameters
        ----------
        findings : mapping
            Findings per store (missing: none).

        Returns
        -------
        list of StoreKey
        """
        return order_stores(self.keys, findings, self.sizes, self.groups, self.rows_sides)

    def decodable_by_rows(self) -> list[StoreKey]:
        """The stores the native readers decode, by rows (see :meth:`by_rows`).

        Returns
        -------
        list of StoreKey
        """
        return [key for key in self.by_rows() if key in self.decodable]

    def latest_version(self, key: StoreKey) -> int | None:
        """A store's latest version (None: none, or an unknown store).

        Parameters
        ----------
        key : StoreKey

        Returns
        -------
        int or None
        """
        versions = self.versions.get(key, ())
        return versions[-1] if versions else None

    def opening(
        self, previous: Mapping[str, Any], reloading: bool, default: StoreKey | None
    ) -> dict[str, Any] | None:
        """The selection a checkpoint opens on: on a reload (F5), what was selected if its store is
        still decoded; else the ``default`` store (``LoadedCheckpoint.default_store``) at its latest
        version, every partition.

        Parameters
        ----------
        previous : mapping
            The selection before (``SelectionState.snapshot``).
        reloading : bool
            The same checkpoint is opened again.
        default : StoreKey or None

        Returns
        -------
        dict or None
            Fields of :class:`app.session.SelectionState`; None when there is no store to open on.
        """
        if reloading and (previous.get("operator_id"), previous.get("store_name")) in self.decodable:
            return dict(previous)
        if default is None:
            return None
        return {
            "operator_id": default[0],
            "store_name": default[1],
            "partition_id": None,
            "version": self.latest_version(default),
        }

    def version_on_switch(self, key: StoreKey, version: int | None, batch_selected: bool) -> int | None:
        """The version shown when the user switches to store ``key``: the one selected when a batch is
        (the state after that batch), else the store's latest.

        Parameters
        ----------
        key : StoreKey
        version : int or None
            The version selected.
        batch_selected : bool
            Whether a batch is selected.

        Returns
        -------
        int or None
        """
        return version if batch_selected else self.latest_version(key)


def in_order(items: Sequence[tuple[int, str, str]], order: Sequence[StoreKey]) -> list[tuple[int, str, str]]:
    """Picker items ``(operator_id, store_name, label)`` sorted as ``order`` lists their stores (stores
    missing from ``order`` last, in their own order).

    Parameters
    ----------
    items : sequence of (int, str, str)
    order : sequence of StoreKey

    Returns
    -------
    list of (int, str, str)
    """
    rank = {key: i for i, key in enumerate(order)}
    return sorted(items, key=lambda item: rank.get((item[0], item[1]), len(rank)))


# -- the overview ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerdictLink:
    """Where a verdict's link leads: another view at a place, or one of the overview's own details.

    Parameters
    ----------
    view : str
        The view to show (``statelens gui --view``).
    details : str or None
        On the overview itself: the details pane to show (``problems`` or ``health``).
    target : mapping
        Where to open ``view``: ``MainWindow.open_at`` keywords (``operator_id``, ``store_name``,
        ``batch_id``, ``partition_id``; None where the verdict names none).
    """

    view: str
    details: str | None = None
    target: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class OverviewState:
    """What the overview shows of the verdicts' job: its summary (None while it runs, or when it failed).

    Attributes
    ----------
    summary : app.analysis.summary.Summary or None
    """

    summary: Summary | None = None

    def reset(self) -> None:
        """Forget the previous summary (the checks run again)."""
        self.summary = None

    @staticmethod
    def verdict_rows(summary: Summary | Sequence[Verdict]) -> list[tuple[str, str, str, dict[str, Any]]]:
        """``(severity, text, view, target)`` per verdict, for ``OverviewView.set_verdicts``: the target
        names the verdict's check and, where it has them, its store, batch and partition.

        Parameters
        ----------
        summary : app.analysis.summary.Summary or sequence of Verdict
            The verdicts of a summary, or the early ones (:func:`app.analysis.summary.early_verdicts`).

        Returns
        -------
        list of (str, str, str, dict)
        """
        rows = []
        for v in summary.verdicts if isinstance(summary, Summary) else summary:
            target: dict[str, Any] = {"check": v.check}
            if v.operator_id is not None and v.store_name is not None:
                target.update(operator_id=v.operator_id, store_name=v.store_name)
            if v.batch_id is not None:
                target["batch_id"] = v.batch_id
            if v.partition is not None:
                target["partition_id"] = v.partition
            rows.append((v.severity, v.text, v.view, target))
        return rows

    @staticmethod
    def health(
        summary: Summary,
    ) -> tuple[list[tuple[str, str, str, tuple[str, ...]]], list[BaseException]]:
        """The health details: doctor's findings ``(severity, check, message, files)``, and the files that
        could not be read: the analyses' problems, then each state file doctor could not decode (once per
        file, as a :class:`StatelensError` naming it).

        Parameters
        ----------
        summary : app.analysis.summary.Summary

        Returns
        -------
        (list of (str, str, str, tuple of str), list of BaseException)
        """
        doctor = summary.doctor
        findings = [(f.severity, f.check, f.message, f.files) for f in doctor.findings] if doctor else []
        unreadable: list[BaseException] = list(summary.problems)
        if doctor is not None:
            seen = {getattr(p, "path", None) for p in unreadable}
            for f in doctor.findings:
                if f.check in UNREADABLE_CHECKS and f.files and f.files[0] not in seen:
                    seen.add(f.files[0])
                    unreadable.append(StatelensError(f.message, path=f.files[0]))
        return findings, unreadable

    @staticmethod
    def link(view: str, target: Mapping[str, Any]) -> VerdictLink:
        """Where the link of a verdict row (:meth:`verdict_rows`) leads: the overview's problems (files
        that could not be read) or health details, else ``view`` at the verdict's store, batch and
        partition.

        Parameters
        ----------
        view : str
        target : mapping
            The row's target.

        Returns
        -------
        VerdictLink
        """
        if view == "overview":
            return VerdictLink(view, "problems" if target.get("check") == "unreadable" else "health")
        return VerdictLink(
            view,
            target={
                "operator_id": target.get("operator_id"),
                "store_name": target.get("store_name"),
                "batch_id": target.get("batch_id"),
                "partition_id": target.get("partition_id"),
            },
        )


# -- the batch timeline ----------------------------------------------------------------------------------
@dataclass
class TimelineState:
    """What the batch timeline remembers of the event logs read: their summary line.

    Attributes
    ----------
    progress_summary : str
        The last event logs' summary line (also shown in the status bar); empty until some were read.
    """

    progress_summary: str = ""

    @staticmethod
    def event_log_path(path: str) -> str:
        """The path to read for ``path``: a file of a rolling event log (``eventlog_v2_*/events_N_*``)
        stands for its folder; any other file or folder for itself.

        Parameters
        ----------
        path : str

        Returns
        -------
        str
        """
        parent = os.path.dirname(path)
        if re.match(r"^events_\d+_", os.path.basename(path)) and os.path.basename(parent).startswith(
            "eventlog_v2_"
        ):
            return parent
        return path

    @classmethod
    def add_event_logs(cls, logs: list[str], paths: Sequence[str]) -> list[str]:
        """Add ``paths`` (as :meth:`event_log_path` reads them) to ``logs``, each once.

        Parameters
        ----------
        logs : list of str
            The event logs added so far (``WindowContext.event_logs``), extended in place.
        paths : sequence of str
            Event logs, driver logs or progress dumps.

        Returns
        -------
        list of str
            The paths added (not already in ``logs``).
        """
        added = []
        for path in map(cls.event_log_path, paths):
            if path not in logs:
                logs.append(path)
                added.append(path)
        return added

    def shown(self, series: ProgressSeries) -> str:
        """Remember the summary of the event logs read and return the readout under the plots.

        Parameters
        ----------
        series : app.analysis.timeline.ProgressSeries

        Returns
        -------
        str
        """
        self.progress_summary = series.summary
        return series.summary + ". Move the mouse over the plots to read a batch."


# -- the key history ------------------------------------------------------------------------------------
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


# -- SQL ------------------------------------------------------------------------------------------------
@dataclass
class SqlState:
    """What the SQL tab shows of its last query and of the tables beside the editor.

    Attributes
    ----------
    answer : app.analysis.sql.SqlTable or None
        The last query's answer (None: none yet, or the query failed).
    error : str or None
        Why the last query failed (None: it did not).
    tables : mapping
        The tables listed and their ``(column, type)``.
    tables_note : str
        Why a table is missing from the list (or why none is listed).
    """

    answer: SqlTable | None = None
    error: str | None = None
    tables: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    tables_note: str = ""

    @staticmethod
    def store_of(store: tuple[int, str] | None) -> tuple[int | None, str | None]:
        """``(operator_id, store_name)`` the ``state`` and ``changes`` tables are read from: the store
        picked, or ``(None, None)`` (the checkpoint's only store, or the query names it).

        Parameters
        ----------
        store : (int, str) or None
            The picker's store.

        Returns
        -------
        (int or None, str or None)
        """
        return store if store is not None else (None, None)

    @staticmethod
    def runs(query: str, opened: bool) -> bool:
        """Whether ``query`` is run: a checkpoint is shown and the query is not blank.

        Parameters
        ----------
        query : str
        opened : bool

        Returns
        -------
        bool
        """
        return opened and bool(query.strip())

    @staticmethod
    def running_text(in_spark: bool, master: str) -> str:
        """What the tab says while a query runs.

        Parameters
        ----------
        in_spark : bool
            The query runs in Spark.
        master : str
            Spark's master (``BackendsController.master``).

        Returns
        -------
        str
        """
        if in_spark:
            return f"Running the query in Spark on {master}…"
        return "Running the query (tables are filled from the checkpoint first)…"

    def answered(self, answer: SqlTable) -> str:
        """Remember ``answer`` and return the status line under it: rows and time, how many are shown,
        files that could not be read.

        Parameters
        ----------
        answer : app.analysis.sql.SqlTable

        Returns
        -------
        str
        """
        self.answer, self.error = answer, None
        shown = len(answer.columns[0]) if answer.columns else 0
        status = f"{answer.total_rows:,} row{'s' if answer.total_rows != 1 else ''} in {answer.seconds:.2f} s"
        if shown < answer.total_rows:
            status += f" (the first {shown:,} shown; statelens sql --csv/--parquet writes them all)"
        if answer.problems:
            status += f" · {len(answer.problems)} file(s) could not be read: see Problems"
        return status

    def failed(self, message: str) -> str:
        """Remember that the last query failed, saying ``message``; returns it.

        Parameters
        ----------
        message : str

        Returns
        -------
        str
        """
        self.answer, self.error = None, message
        return message

    def listed(self, tables: Mapping[str, Sequence[tuple[str, str]]], note: str = "") -> None:
        """Remember the tables listed beside the editor.

        Parameters
        ----------
        tables : mapping
            Each table's ``(column, type)``.
        note : str
            Why a table is missing.
        """
        self.tables, self.tables_note = dict(tables), note


# -- schema and conf ------------------------------------------------------------------------------------
#: A row of the schema files' table: ``(store, from batch, path, changes)``.
SchemaFileRow = tuple[str, int | None, str, list[str]]


@dataclass
class SchemaState:
    """What the schema view shows besides the stores' schemas: the schema files read (none until read).

    Attributes
    ----------
    files : list of SchemaFileRow
    """

    files: list[SchemaFileRow] = field(default_factory=list)

    def reset(self) -> None:
        """Forget the previous checkpoint's schema files."""
        self.files = []

    def read(self, versions: Sequence[SchemaVersion]) -> list[SchemaFileRow]:
        """Remember the schema files read and return their rows, oldest first. Their store is a short
        label: the files table is narrow, and every store of an operator starts alike.

        Parameters
        ----------
        versions : sequence of app.explore.SchemaVersion
            ``app.explore.read_schema_history``'s.

        Returns
        -------
        list of SchemaFileRow
        """
        self.files = [
            (f"operator {v.operator_id} · {v.store_name}", v.from_batch, v.path, v.changes) for v in versions
        ]
        return self.files

    @staticmethod
    def store_shown(selection: SelectionState) -> tuple[int | None, str | None]:
        """The store whose schema shows once the files are read: the one selected.

        Parameters
        ----------
        selection : SelectionState

        Returns
        -------
        (int or None, str or None)
        """
        return selection.operator_id, selection.store_name


# -- the state browser -----------------------------------------------------------------------------------
#: Pages of a paged table waited for at most (older asks, scrolled past, are given up).
PAGES_WAITED = 6


@dataclass(frozen=True)
class BrowserRead:
    """What the state browser reads next: one version of a store, or the diff of two.

    Parameters
    ----------
    operator_id : int
    store_name : str
    version : int or None
        The version selected (None: the store has no readable version).
    partition_id : int or None
        None reads every partition.
    compare_version : int or None
        The version compared with (None, or ``version`` itself: no diff).
    """

    operator_id: int
    store_name: str
    version: int | None
    partition_id: int | None
    compare_version: int | None = None

    @property
    def is_diff(self) -> bool:
        """Whether two different versions are compared."""
        return (
            self.compare_version is not None
            and self.version is not None
            and self.compare_version != self.version
        )

    @property
    def diff_versions(self) -> tuple[int, int]:
        """``(old, new)`` of a diff.

        Raises
        ------
        ValueError
            When this read is not a diff.
        """
        if not self.is_diff:
            raise ValueError("not a diff: one version is read")
        assert self.compare_version is not None and self.version is not None
        old, new = sorted((self.compare_version, self.version))
        return old, new

    @property
    def where(self) -> str:
        """``all partitions`` or ``partition N``."""
        return partitions_text(self.partition_id)


def partitions_text(partition_id: int | None) -> str:
    """``all partitions`` (None) or ``partition N``.

    Parameters
    ----------
    partition_id : int or None

    Returns
    -------
    str
    """
    return "all partitions" if partition_id is None else f"partition {partition_id}"


@dataclass
class BrowserState:
    """What the state browser remembers besides the shared selection: the version compared with, the
    rows shown and the pages of a paged table waited for.

    Attributes
    ----------
    compare_version : int or None
        The version the selected one is compared with (None: no diff).
    table : app.session.StateTable or None
        The rows (or diff) shown.
    pages_wanted : list of int
        Offsets of a paged table's pages to read, asked for last last.
    """

    compare_version: int | None = None
    table: StateTable | None = None
    pages_wanted: list[int] = field(default_factory=list)

    def reset(self) -> None:
        """Forget the previous checkpoint's comparison and pages (the table is closed by its owner)."""
        self.compare_version = None
        self.pages_wanted.clear()

    def read(self, selection: SelectionState) -> BrowserRead | None:
        """What to read for ``selection``: its store, version and partition, diffed with
        :attr:`compare_version`.

        Parameters
        ----------
        selection : SelectionState

        Returns
        -------
        BrowserRead or None
            None while no store is selected.
        """
        if selection.operator_id is None or selection.store_name is None:
            return None
        return BrowserRead(
            selection.operator_id,
            selection.store_name,
            selection.version,
            selection.partition_id,
            self.compare_version,
        )

    def want_page(self, offset: int) -> list[int]:
        """Ask for the page at ``offset`` (again: it moves last); at most :data:`PAGES_WAITED` wait.

        Parameters
        ----------
        offset : int

        Returns
        -------
        list of int
            Offsets given up (scrolled past; asked for again if shown again).
        """
        wanted = self.pages_wanted
        if offset in wanted:
            wanted.remove(offset)
        wanted.append(offset)
        dropped = wanted[:-PAGES_WAITED]
        del wanted[:-PAGES_WAITED]
        return dropped

    def next_page(self) -> int | None:
        """The page to read next: the one asked for last (the rows on screen), or None.

        Returns
        -------
        int or None
        """
        return self.pages_wanted.pop() if self.pages_wanted else None

    def describe(self, table: StateTable, role_text: str | None) -> str:
        """The status line of ``table``: rows (or the diff), store, partitions, version, notes, backend.

        Parameters
        ----------
        table : app.session.StateTable
        role_text : str or None
            What the store holds (``StoreRole.text``).

        Returns
        -------
        str
        """
        if table.is_diff:
            head = f"diff of versions {table.compare_version} → {table.version}"
        else:
            head = f"{table.total_rows:,} row{'s' if table.total_rows != 1 else ''}"
        parts = [
            head,
            f"operator {table.operator_id} {table.store_name}"
            + (f" ({role_text})" if role_text is not None else ""),
            partitions_text(table.partition_id),
        ]
        if not table.is_diff:
            parts.append(f"version {table.version} (state after batch {table.version - 1})")
        parts.extend(table.notes)
        parts.append(f"read by {backend_text(table.backend)}")
        if table.problems:
            parts.append(f"{len(table.problems)} partition(s) could not be read: see Problems")
        if table.query is not None:
            parts.insert(1, "paged from the cache by DuckDB")
        return " · ".join(parts)


def backend_text(description: str) -> str:
    """``the native decoder`` / ``Spark 4.x on local[*]``, as said after "read by".

    Parameters
    ----------
    description : str
        ``StateTable.backend``.

    Returns
    -------
    str
    """
    return f"the {description}" if description == "native decoder" else description


# -- expired keys ----------------------------------------------------------------------------------------
@dataclass
class ExpiredState:
    """What the expired view shows: the analysis (None until it is done).

    Attributes
    ----------
    overview : app.explore.ExpiredOverview or None
    """

    overview: ExpiredOverview | None = None

    def reset(self) -> None:
        """Forget the previous checkpoint's analysis."""
        self.overview = None

    def store_order(self, catalog: StoreCatalog) -> list[StoreKey]:
        """The picker's order: by rows until the analysis is done, then the stores with the most findings
        first (:meth:`StoreCatalog.by_findings`).

        Parameters
        ----------
        catalog : StoreCatalog

        Returns
        -------
        list of StoreKey
        """
        if self.overview is None:
            return catalog.by_rows()
        return catalog.by_findings(self.overview.findings_per_store())

    @staticmethod
    def store_to_show(
        order: Sequence[StoreKey], selected: tuple[int | None, str | None], chosen: bool
    ) -> StoreKey | None:
        """The store the view opens on: the one the user (or ``gui --store``) picked, else the first listed.

        Parameters
        ----------
        order : sequence of StoreKey
            The picker's order (:meth:`store_order`).
        selected : (int or None, str or None)
            The selection's ``(operator_id, store_name)``.
        chosen : bool
            Whether the user picked that store (``WindowContext.store_chosen``).

        Returns
        -------
        StoreKey or None
            None when there is no store.
        """
        if chosen and selected in order:
            return selected  # type: ignore[return-value]
        return order[0] if order else None

    def findings(self) -> list[ExpiredFinding]:
        """Every store's findings the view lists (the analysis' capped examples).

        Returns
        -------
        list of ExpiredFinding
        """
        return list(self.overview.result.examples) if self.overview is not None else []

    def store_findings(self, key: StoreKey | None) -> list[ExpiredFinding]:
        """The findings listed for one store (empty when unknown or not analysed).

        Parameters
        ----------
        key : StoreKey or None

        Returns
        -------
        list of ExpiredFinding
        """
        st = self.overview.store(*key) if self.overview is not None and key is not None else None
        return list(st.examples) if st is not None else []

    @staticmethod
    def finding_selection(
        store: StoreKey, partition_id: int, version: int, key: Any, browsable: bool
    ) -> dict[str, Any]:
        """The selection change showing a finding picked in the table: its key, and where it is when
        the browser can show its store.

        Parameters
        ----------
        store : StoreKey
            The store shown.
        partition_id, version : int
            Where the finding is.
        key : JsonObject
        browsable : bool
            Whether the native reader decodes the store (``WindowContext.store_exists``).

        Returns
        -------
        dict
            Fields of :class:`app.session.SelectionState`.
        """
        change: dict[str, Any] = {"key": key, "key_partition_id": partition_id}
        if browsable:
            change.update(
                operator_id=store[0],
                store_name=store[1],
                partition_id=partition_id,
                version=version,
                batch_id=version - 1 if version > 0 else None,
            )
        return change


# -- state growth --------------------------------------------------------------------------------------
@dataclass
class GrowthState:
    """What the growth view remembers: whether growth was measured and whose heaviest keys were asked for.

    Attributes
    ----------
    top_keys : int
        Heaviest keys listed per store.
    done : bool
        Growth was measured for the checkpoint shown (its keys are weighed after).
    weighed : set of StoreKey
        Stores whose heaviest keys were asked for (or came with growth).
    """

    top_keys: int = 10
    done: bool = False
    weighed: set[StoreKey] = field(default_factory=set)

    def reset(self) -> None:
        """Forget the previous checkpoint."""
        self.done = False
        self.weighed = set()

    def to_weigh(
        self, selected: tuple[int | None, str | None], decodable: Collection[StoreKey]
    ) -> StoreKey | None:
        """The store whose keys to weigh now, marked as asked for: the selected one, once growth is
        measured, once per store and checkpoint, if the native reader decodes it.

        Parameters
        ----------
        selected : (int or None, str or None)
            The selection's ``(operator_id, store_name)``.
        decodable : collection of StoreKey
            The stores the native reader decodes (:attr:`StoreCatalog.decodable`).

        Returns
        -------
        StoreKey or None
            None when nothing is to be weighed.
        """
        op, name = selected
        if (
            not self.done
            or op is None
            or name is None
            or (op, name) in self.weighed
            or (op, name) not in decodable
        ):
            return None
        self.weighed.add((op, name))
        return op, name

    def forget(self, key: StoreKey) -> None:
        """Weighing ``key`` failed: it may be asked for again.

        Parameters
        ----------
        key : StoreKey
        """
        self.weighed.discard(key)

    @staticmethod
    def store_notes(growth: StoreGrowth, problems: Sequence[StatelensError], role: StoreRole | None) -> str:
        """The note under a store's growth: files that could not be read, what a column family's bytes
        count, that list state counts elements.

        Parameters
        ----------
        growth : app.analysis.growth.StoreGrowth
        problems : sequence of StatelensError
            The growth run's problems (every store's).
        role : StoreRole or None
            What the store holds.

        Returns
        -------
        str
        """
        bad = [
            p
            for p in problems
            if p.context.get("operator_id") == growth.operator_id
            and p.context.get("store_name") == growth.store_name
        ]
        notes = (
            [f"{len(bad)} file(s) could not be read; their versions are gaps. See Problems."] if bad else []
        )
        if role is not None and role.column_family_of:
            notes.append(
                f"A column family of RocksDB store {role.column_family_of!r}: rows and key + value bytes "
                "are this family's; bytes written count the whole store's files (shared by its families)."
            )
        if role is not None and role.text.startswith("ListState"):
            notes.append("List state: one row per list element.")
        return " ".join(notes)
