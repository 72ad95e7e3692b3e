"""Fuzz harness for operator metadata v1, v2: ``readers.opmeta.parse_operator_metadata`` (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("opmeta")
