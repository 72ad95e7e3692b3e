"""What the growth view remembers and decides, without Qt: whether growth was measured, whose heaviest
keys to weigh, the notes under a store (rendered by :mod:`app.gui.controllers.growth`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from statelens.app.analysis.growth import StoreGrowth
from statelens.app.analysis.runs import Run
from statelens.app.gui.controllers.catalog import StoreKey
from statelens.app.session import StoreRole
from statelens.readers.errors import StatelensError


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
    runs : list of Run or None
        The checkpoint's runs (None until looked at).
    chosen : int or None
        The fix batch the user chose (None: the last restart).
    rows : dict
        Rows per version of every store measured, every partition present.
    """

    top_keys: int = 10
    done: bool = False
    weighed: set[StoreKey] = field(default_factory=set)
    #: The checkpoint's runs: from its batch times, or the verdicts' (the event logs' run ids) when in.
    runs: list[Run] | None = None
    #: The fix batch the user chose (None: the last restart).
    chosen: int | None = None
    #: Rows per version of every store measured (for the rates before and after the fix).
    rows: dict[StoreKey, dict[int, int]] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget the previous checkpoint."""
        self.done = False
        self.weighed = set()
        self.runs = None
        self.chosen = None
        self.rows = {}

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
