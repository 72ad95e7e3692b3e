"""Fuzz harness for state schema files v1, v2, v3: ``readers.schemas`` (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("schemas")
