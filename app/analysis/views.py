"""The desktop app's views, by the names ``statelens gui --view`` and the verdicts use (Qt-free, so the
command line and the analyses can name them)."""

from __future__ import annotations

#: View name -> what it shows, in tab order.
VIEWS = {
    "overview": "the verdicts, then the checkpoint's batches, operators, health checks and unreadable files",
    "timeline": "batch start times, intervals and the watermark (durations and rates with --event-log)",
    "growth": "rows and bytes per store over versions, per partition, and the heaviest keys",
    "expired": "keys expired but still in the state (zombies, overdue, stale, eviction lag)",
    "browser": "the rows of one store at one version, a partition, a key and its history",
    "sql": "SQL over the state (DuckDB, or Spark)",
    "schema": "schema files and the session conf over batches",
}
