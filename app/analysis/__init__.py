"""Post-mortem analysis of a checkpoint, Qt-free: expired keys, timeline, growth, health, report.

Each long analysis is an ``iter_*`` generator that yields :class:`readers.model.Progress` records and
returns its result, so the command line and the desktop app drive the same code.
"""

from __future__ import annotations
