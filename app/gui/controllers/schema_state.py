"""What the schema view remembers, without Qt: the schema files read (rendered by
:mod:`app.gui.controllers.schema`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from statelens.app.explore import SchemaVersion
from statelens.app.session import SelectionState

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
