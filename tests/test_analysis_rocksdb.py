"""The post-mortem analysis reads RocksDB stores through the same reader interface as HDFS ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statelens.app.cli import main

pytestmark = pytest.mark.spark


def test_expired_on_rocksdb_matches_the_functions_own_report(
    checkpoint: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = checkpoint("rocks_pandas_state")
    expected = json.loads((folder / "expected.json").read_text())
    assert expected["provider"].endswith("RocksDBStateStoreProvider")
    code = main(["expired", str(folder / "checkpoint"), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    findings = json.loads(out)
    zombies = {f["key"]["key"] for f in findings if f["category"] == "zombie"}
    assert set(expected["leaked"]) <= zombies
    assert not zombies & set(expected["removed"]), "keys the function removed are never reported"
    assert zombies <= set(expected["final_keys"])


def test_growth_on_rocksdb_counts_the_final_keys(checkpoint: Any, capsys: pytest.CaptureFixture[str]) -> None:
    folder = checkpoint("rocks_pandas_state")
    expected = json.loads((folder / "expected.json").read_text())
    assert main(["growth", str(folder / "checkpoint"), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    last = max(r["version"] for r in records)
    assert sum(r["rows"] for r in records if r["version"] == last) == len(expected["final_keys"])
