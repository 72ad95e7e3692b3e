"""Fuzz harness for UnsafeRow: ``readers._format.unsaferow.decode_row`` and ``decode_rows`` on real schemas (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("unsaferow")
