"""Where RocksDB zips are restored (``readers._format.rocksdb_store.workspace_base``): a memory file
system by default when it has room, the user's folders when named, the system's otherwise; checked on a
real checkpoint written by PySpark with the RocksDB provider (no changelogs: every version a zip)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statelens.readers._format import rocksdb_store
from statelens.readers._format.rocksdb_store import workspace_base
from statelens.readers.checkpoint import open_checkpoint


@pytest.fixture
def no_tmp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATELENS_TMPDIR", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)


def test_named_folders_come_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_tmp_env: None) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert workspace_base(0) is None  # the system's temporary folder: $TMPDIR, as tempfile reads it
    monkeypatch.setenv("STATELENS_TMPDIR", str(tmp_path / "mine"))
    assert workspace_base(0) == str(tmp_path / "mine")


def test_memory_is_used_only_with_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_tmp_env: None
) -> None:
    monkeypatch.setattr(rocksdb_store, "MEMORY_TMP", str(tmp_path))
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    monkeypatch.setattr(rocksdb_store, "MEMORY_TMP_MIN_FREE", free // 2)
    assert workspace_base(0) == str(tmp_path)
    assert workspace_base(free // 8) == str(tmp_path)  # four times the store fits
    assert workspace_base(free // 2) is None  # it does not: the system's folder
    monkeypatch.setattr(rocksdb_store, "MEMORY_TMP_MIN_FREE", free * 2)
    assert workspace_base(0) is None  # less free than the minimum (a container's 64 MiB /dev/shm)
    monkeypatch.setattr(rocksdb_store, "MEMORY_TMP", str(tmp_path / "missing"))
    assert workspace_base(0) is None


def test_a_store_restores_its_zips_where_workspace_base_says(
    checkpoint: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_tmp_env: None
) -> None:
    """Every workspace of a read goes under the folder chosen, and is gone after it; the rows are those
    of a read with workspaces in the system's folder."""
    root = checkpoint("rocks_agg") / "checkpoint"
    made: list[str | None] = []
    real_mkdtemp = rocksdb_store.tempfile.mkdtemp

    def mkdtemp(prefix: str = "", dir: str | None = None) -> str:  # noqa: A002 (tempfile's name)
        made.append(dir)
        return real_mkdtemp(prefix=prefix, dir=dir)

    monkeypatch.setattr(rocksdb_store.tempfile, "mkdtemp", mkdtemp)
    mine = tmp_path / "workspaces"
    mine.mkdir()
    monkeypatch.setenv("STATELENS_TMPDIR", str(mine))
    reader = open_checkpoint(str(root)).store_reader(0)
    assert reader.provider == "rocksdb" and reader.temp_dir is None
    pid = reader.partition_ids()[0]
    version = max(reader.versions(pid))
    ours = reader.read_raw(pid, version)
    assert made and set(made) == {str(mine)} and list(mine.iterdir()) == []
    monkeypatch.delenv("STATELENS_TMPDIR")
    monkeypatch.setattr(rocksdb_store, "MEMORY_TMP", str(tmp_path / "missing"))
    made.clear()
    system = open_checkpoint(str(root)).store_reader(0).read_raw(pid, version)
    assert made == [None] * len(made) and made
    assert ours == system and len(ours) > 0
