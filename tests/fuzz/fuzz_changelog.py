"""Fuzz harness for RocksDB changelogs: ``readers._format.records.scan_changelog`` (v1-v4) and the row checks (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("changelog")
