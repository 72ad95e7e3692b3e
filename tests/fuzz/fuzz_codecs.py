"""Fuzz harness for codec framing: ``readers._format.codecs.decompress`` (lz4, zstd, snappy, lzf) (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("codecs")
