"""What the SQL tab remembers and decides, without Qt: its last answer, the tables beside the editor and
its status line (rendered by :mod:`app.gui.controllers.sql`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from statelens.app.analysis.sql import SqlTable


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
