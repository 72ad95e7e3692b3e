"""Fuzz harness for text logs: ``metadata``, ``offsets/``, ``commits/``, ``sources/`` (``readers.logs``) (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("logs")
