"""What the overview remembers and decides, without Qt: the verdicts' summary, their rows, health
details and where a verdict's link leads (rendered by :mod:`app.gui.controllers.overview`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statelens.app.analysis.summary import UNREADABLE_CHECKS, Summary, Verdict
from statelens.readers.errors import StatelensError


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
