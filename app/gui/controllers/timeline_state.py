"""What the batch timeline remembers and decides, without Qt: the event logs' summary line and which
path stands for a rolling event log (rendered by :mod:`app.gui.controllers.timeline`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from statelens.app.analysis.timeline import ProgressSeries


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
