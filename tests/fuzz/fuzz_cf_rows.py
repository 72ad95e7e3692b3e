"""Fuzz harness for column family keys and values: ``readers._format.cf_store.decode_keys`` (every key encoder),
``decode_values`` and ``readers._format.avro_rows.decode_avro``, list values (see :mod:`tests.fuzz.targets`)."""

from __future__ import annotations

from tests.fuzz._atheris import main

if __name__ == "__main__":
    main("cf_rows")
