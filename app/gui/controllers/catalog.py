"""The store catalog every tab's state orders its store pickers by, without Qt.

Each tab's controller holds a plain state object of its own, in the module beside it
(``growth_state.py`` beside ``growth.py``...), and renders it into its view; the decisions that need no
widget are methods there, tested without a ``QApplication`` (``tests/test_gui_state.py``). The shared
selection (store, version, partition, key) is :class:`app.session.SelectionState`; the stores it picks
from, and the orders the pickers list them in, are the :class:`StoreCatalog` here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.explore import order_stores
from statelens.app.session import LoadedCheckpoint
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
