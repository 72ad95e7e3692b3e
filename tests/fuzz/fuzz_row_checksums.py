"""Fuzz harness for row checksums: ``readers._format.rowchecksum.strip_*`` and the RocksDB reader's
``split_checked_operands`` / ``split_list_value`` (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("row_checksums")
