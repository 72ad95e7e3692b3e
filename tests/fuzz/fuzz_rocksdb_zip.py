"""Fuzz harness for RocksDB ``<v>.zip`` files: ``readers._format.rocksdb_store.read_zip`` and ``parse_zip_metadata`` (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("rocksdb_zip")
