"""Fuzz harness for record streams: ``readers._format.records.scan_records`` and ``scan_changelog`` (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("records")
