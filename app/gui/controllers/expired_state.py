"""What the expired keys view remembers and decides, without Qt: the analysis, the picker's order and
the selection a finding picked makes (rendered by :mod:`app.gui.controllers.expired`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statelens.app.analysis.expired import ExpiredFinding
from statelens.app.analysis.runs import Run
from statelens.app.explore import ExpiredOverview
from statelens.app.gui.controllers.catalog import StoreCatalog, StoreKey


@dataclass
class ExpiredState:
    """What the expired view shows: the analysis (None until it is done).

    Attributes
    ----------
    overview : app.explore.ExpiredOverview or None
    runs : list of Run or None
        The checkpoint's runs (None until looked at).
    chosen : int or None
        The fix batch the user chose (None: the last restart).
    """

    overview: ExpiredOverview | None = None
    #: The checkpoint's runs: from its batch times, or the verdicts' (the event logs' run ids) when in.
    runs: list[Run] | None = None
    #: The fix batch the user chose (None: the last restart).
    chosen: int | None = None

    def reset(self) -> None:
        """Forget the previous checkpoint's analysis."""
        self.overview = None
        self.runs = None
        self.chosen = None

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
