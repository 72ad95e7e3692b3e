"""The "Prune these keys into a copy..." dialog of the expired view: the dry run first, then the copy.

It runs :func:`app.prune.iter_prune` on the app's job runner: on opening, a dry run (what would be
removed, per partition, and the keys); with a folder chosen and "Write pruned copy" pressed, the copy,
the added batch and the proof. A refusal (a format statelens cannot write, an uncommitted last batch, a
folder that is not empty, errors ``statelens doctor`` finds in files the copy would carry) is shown in
the dialog, in words, with nothing written; for the doctor's errors it offers to go on anyway (``force``),
and the forced copy's result names what it carries instead of saying to restart on it.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from statelens.app.analysis._common import counted
from statelens.app.gui.workers import JobRunner
from statelens.app.prune import DamagedSourceError, PrunePlan, Selection, finding_text, iter_prune
from statelens.readers.errors import StatelensError

__all__ = ["PruneDialog"]

_CHANNEL = "prune"
#: Keys listed in the dialog (the report holds them all).
MAX_KEYS_SHOWN = 500


class PruneDialog(QDialog):
    """Dry run, then a pruned copy, of the keys of one selection.

    Parameters
    ----------
    ckpt : readers.checkpoint.Checkpoint
        The checkpoint the app has open (only read).
    selection : app.prune.Selection
        Which keys (the expired view passes its store's zombies).
    runner : JobRunner
        Where the dry run and the copy run (channel ``prune``).
    parent : QWidget, optional
    """

    def __init__(
        self, ckpt: Any, selection: Selection, runner: JobRunner, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Prune expired keys into a copy")
        self.resize(760, 560)
        self._ckpt, self._selection, self._runner = ckpt, selection, runner
        self.plan: PrunePlan | None = None
        self._force = False

        layout = QVBoxLayout(self)
        self.summary = QLabel("Dry run: reading the keys to remove…")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.summary)
        self.table = QTableWidget(0, 6)
        self.table.setHorizontalHeaderLabels(["operator", "store", "partition", "rows", "removed", "bytes"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout.addWidget(self.table, 1)
        self.keys = QLabel("")
        self.keys.setWordWrap(True)
        self.keys.setTextFormat(Qt.TextFormat.PlainText)
        self.keys.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.keys)

        target = QHBoxLayout()
        target.addWidget(QLabel("Copy to (a new or empty folder):"))
        self.target_edit = QLineEdit()
        self.target_edit.setPlaceholderText("choose where the pruned copy goes")
        self.target_edit.textChanged.connect(self._update_buttons)
        target.addWidget(self.target_edit, 1)
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._choose_folder)
        target.addWidget(browse)
        layout.addLayout(target)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        layout.addWidget(self.progress)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.result)

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.apply_button = self.buttons.addButton(
            "Write pruned copy", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.apply_button.setEnabled(False)
        self.apply_button.clicked.connect(self._apply)
        self.force_button = self.buttons.addButton(
            "Go on anyway, carrying the damage", QDialogButtonBox.ButtonRole.ActionRole
        )
        self.force_button.setVisible(False)
        self.force_button.clicked.connect(self._go_on_forced)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self._dry_run()

    def _dry_run(self) -> None:
        self._busy = True
        self._runner.submit(
            _CHANNEL,
            iter_prune,
            self._ckpt,
            self._selection,
            force=self._force,
            what="prune: dry run",
            on_result=self._on_dry_run,
            on_error=self._on_error,
            on_yield=self._on_progress,
        )

    # -- results ---------------------------------------------------------------------------------------
    def _on_dry_run(self, plan: PrunePlan) -> None:
        self._busy = False
        self.plan = plan
        self.progress.setVisible(False)
        if not plan.removed_rows:
            self.summary.setText("No key to remove: nothing would be written.")
        else:
            self.summary.setText(
                f"Would remove {counted(plan.removed_rows, 'row')} "
                f"({plan.removed_bytes:,} bytes as stored) from state version {plan.base_version}, the state "
                f"after batch {plan.last_batch}. The copy gains batch {plan.new_batch}, which reads no data and "
                f"whose state version {plan.new_version} removes these keys; the checkpoint itself is not written."
            )
        rows = [(s, p) for s in plan.stores for p in s.partitions if p.removed_rows]
        self.table.setRowCount(len(rows))
        for i, (s, p) in enumerate(rows):
            values = (s.operator_id, s.store_name, p.partition, p.rows, p.removed_rows, p.removed_bytes)
            for j, v in enumerate(values):
                item = QTableWidgetItem(f"{v:,}" if isinstance(v, int) and j >= 3 else str(v))
                if j != 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, item)
        self.table.resizeColumnsToContents()
        keys = [json.dumps(k, ensure_ascii=False) for _s, p in rows for k in p.shown]
        more = f" … and {len(keys) - MAX_KEYS_SHOWN:,} more" if len(keys) > MAX_KEYS_SHOWN else ""
        self.keys.setText(("Keys: " + ", ".join(keys[:MAX_KEYS_SHOWN]) + more) if keys else "")
        if plan.findings:
            self.result.setStyleSheet("color: #b00020;" if plan.carried_errors else "")
            self.result.setText(
                "statelens doctor finds, in files the copy would carry and a restart of it loads:\n"
                + "\n".join(f"{f.severity}: {finding_text(f)}" for f in plan.findings)
            )
        self._update_buttons()

    def _on_applied(self, plan: PrunePlan) -> None:
        self._busy = False
        self.plan = plan
        self.progress.setVisible(False)
        proof = plan.proof
        carried = plan.carried_errors
        if proof is not None and proof.ok:
            self.result.setStyleSheet("color: #b00020;" if carried else "color: #1b7f3b;")
            self.result.setText(
                f"Written to {plan.target}: {counted(plan.copied_files, 'file')} copied, {len(plan.written)} written. "
                f"Proof: read back, the copy holds {counted(proof.kept_rows, 'row')} identical to the original and none "
                f"of the {counted(proof.gone_rows, 'row')} removed. "
                + (
                    f"Forced: the copy carries {counted(len(carried), 'error')} statelens doctor finds "
                    f"({'; '.join(finding_text(f) for f in carried)}); a restart on {plan.target} loads them: "
                    "repair them before restarting the same query there."
                    if carried
                    else f"Restart the same query on {plan.target}: it runs batch {plan.new_batch + 1} next."
                )
            )
        else:
            self.result.setStyleSheet("color: #b00020;")
            detail = "; ".join(proof.mismatches[:3]) if proof is not None else "no proof"
            self.result.setText(f"The copy does not read back as expected; do not restart from it: {detail}")
        self._update_buttons()

    def _on_error(self, err: BaseException) -> None:
        self._busy = False
        self.progress.setVisible(False)
        self.result.setStyleSheet("color: #b00020;")
        text = err.message if isinstance(err, StatelensError) else f"{type(err).__name__}: {err}"
        if isinstance(err, DamagedSourceError):  # the findings, one a line; the button stands for --force
            text = (
                f"The copy would carry {counted(len(err.findings), 'error')} statelens doctor finds in files a "
                "restart of it loads:\n"
                + "\n".join(finding_text(f) for f in err.findings)
                + (
                    "\n“Go on anyway” copies them and names each in the result."
                    if err.forceable
                    else "\nprune reads these files itself to build and prove the new version: it cannot carry them."
                )
            )
        self.result.setText(f"Nothing written. {text}")
        if self.plan is None:  # the dry run itself stopped: the heading no longer says it is reading
            self.summary.setText("Dry run stopped: nothing to remove was chosen (see below)")
        self.force_button.setVisible(
            isinstance(err, DamagedSourceError) and err.forceable and not self._force
        )
        self._update_buttons()

    def _on_progress(self, p: Any) -> None:
        self.progress.setVisible(True)
        self.progress.setMaximum(max(p.total, 1))
        self.progress.setValue(min(p.done, p.total))
        self.progress.setFormat(f"{p.what[:60]}  %p%")

    # -- actions ---------------------------------------------------------------------------------------
    def _go_on_forced(self) -> None:
        """Run the dry run again with ``force``: the copy written next carries the damage, named."""
        self._force = True
        self.force_button.setVisible(False)
        self.result.setStyleSheet("")
        self.result.setText("")
        self.summary.setText("Dry run: reading the keys to remove…")
        self._dry_run()

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder for the pruned copy")
        if folder:
            self.target_edit.setText(folder)

    def _update_buttons(self) -> None:
        ready = (
            not self._busy
            and self.plan is not None
            and not self.plan.applied
            and self.plan.removed_rows > 0
            and bool(self.target_edit.text().strip())
        )
        self.apply_button.setEnabled(ready)

    def _apply(self) -> None:
        self._busy = True
        self._update_buttons()
        self.result.setStyleSheet("")
        self.result.setText("Copying the checkpoint and writing the pruned batch…")
        self._runner.submit(
            _CHANNEL,
            iter_prune,
            self._ckpt,
            self._selection,
            self.target_edit.text().strip(),
            apply=True,
            force=self._force,
            what="prune: writing the copy",
            on_result=self._on_applied,
            on_error=self._on_error,
            on_yield=self._on_progress,
        )

    def done(self, result: int) -> None:  # noqa: D102 - QDialog API
        self._runner.cancel(_CHANNEL)
        super().done(result)
