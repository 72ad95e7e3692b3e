"""What the state browser remembers and decides, without Qt: what it reads next, the pages of a paged
table it waits for and its status line (rendered by :mod:`app.gui.controllers.browser`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statelens.app.session import SelectionState, StateTable

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
