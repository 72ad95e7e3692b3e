"""The overview's verdicts: runs :func:`app.analysis.summary.iter_summary` when a checkpoint is shown and
hands its verdicts, health checks and problems to :class:`viewers.overview.OverviewView`; a verdict's
link opens the view that proves it, where it points (``MainWindow.open_at``)."""

from __future__ import annotations

from typing import Any

from statelens.app.analysis.expired import DEFAULT_MAX_EXAMPLES
from statelens.app.analysis.summary import UNREADABLE_CHECKS, Summary, iter_summary
from statelens.app.gui import errors
from statelens.readers.errors import StatelensError

#: The runner channel of the verdicts' job.
CHANNEL = "summary"
PENDING = (
    "Checking the checkpoint: health checks (every state file is read), expired keys, state growth, "
    "watermark…"
)


def verdict_rows(summary: Summary) -> list[tuple[str, str, str, dict[str, Any]]]:
    """``(severity, text, view, target)`` per verdict, for :meth:`OverviewView.set_verdicts`."""
    rows = []
    for v in summary.verdicts:
        target: dict[str, Any] = {"check": v.check}
        if v.operator_id is not None and v.store_name is not None:
            target.update(operator_id=v.operator_id, store_name=v.store_name)
        if v.batch_id is not None:
            target["batch_id"] = v.batch_id
        if v.partition is not None:
            target["partition_id"] = v.partition
        rows.append((v.severity, v.text, v.view, target))
    return rows


class VerdictsController:
    """Runs the verdicts' job for the window and shows its answer in the overview.

    Parameters
    ----------
    window : app.gui.window.MainWindow
        Owns the runner, the overview, the problems panel, ``open_at`` and ``adopt_summary`` (not
        imported here: the window imports this module).
    """

    def __init__(self, window: Any) -> None:
        self.window = window
        self.summary: Summary | None = None
        window.overview.view_requested.connect(self._on_overview_view_requested)

    def start(self, ckpt: Any, top_keys: int | None = None) -> None:
        """Check ``ckpt`` (the checkpoint just shown) in the background; ``top_keys`` heaviest keys are
        weighed on growth's walk for the growth view."""
        w = self.window
        self.summary = None
        w.overview.set_verdicts_pending(PENDING)
        w.runner.submit(
            CHANNEL,
            iter_summary,
            ckpt,
            event_logs=list(w.event_logs) or None,
            storage_options=w.storage_options or None,
            # The growth and expired views show the same runs (no second read): see _adopt.
            max_examples=DEFAULT_MAX_EXAMPLES,
            top_keys=top_keys,
            what="Checking the checkpoint for the verdicts",
            on_result=self._on_summary_finished,
            on_error=self._on_summary_errored,
        )

    def _on_summary_finished(self, summary: Summary | None) -> None:
        if summary is None:  # stopped before its end (Cancel)
            return
        self.summary = summary
        w = self.window
        w.overview.set_verdicts(verdict_rows(summary))
        doctor = summary.doctor
        findings = [(f.severity, f.check, f.message, f.files) for f in doctor.findings] if doctor else []
        # Files the analyses could not read, and the state files doctor could not decode.
        unreadable: list[BaseException] = list(summary.problems)
        if doctor is not None:
            seen = {getattr(p, "path", None) for p in unreadable}
            for f in doctor.findings:
                if f.check in UNREADABLE_CHECKS and f.files and f.files[0] not in seen:
                    seen.add(f.files[0])
                    unreadable.append(StatelensError(f.message, path=f.files[0]))
        w.overview.set_health(findings, unreadable)
        w.problems.add_problems(summary.problems, where="verdicts")
        w.verdicts_updated.emit()
        w.adopt_summary(summary)

    def _on_summary_errored(self, err: BaseException) -> None:
        self.window.overview.set_verdicts_pending(
            f"The verdicts could not be computed: {errors.short_message(err)}"
        )
        if isinstance(err, StatelensError):
            self.window.problems.add_problems([err], where="verdicts")
        else:
            errors.show_error(err, title="Checking the checkpoint failed")
        self.window.verdicts_updated.emit()

    def _on_overview_view_requested(self, view: str, target: dict[str, Any]) -> None:
        if view == "overview":
            check = target.get("check")
            self.window.overview.show_details("problems" if check == "unreadable" else "health")
            return
        self.window.open_at(
            view,
            operator_id=target.get("operator_id"),
            store_name=target.get("store_name"),
            batch_id=target.get("batch_id"),
            partition_id=target.get("partition_id"),
        )
