"""The read-only filesystem layer: any fsspec URL, one listing, parallel reads, typed errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import MissingFileError, NotACheckpointError, StorageError
from statelens.readers.fs import CheckpointFS


def _upload(local: Path, url_root: str) -> None:
    fs = fsspec.filesystem("memory")
    for p in sorted(local.rglob("*")):
        if p.is_file():
            fs.pipe(f"{url_root}/{p.relative_to(local).as_posix()}", p.read_bytes())


@pytest.mark.spark
def test_memory_url_reads_like_the_local_copy(checkpoint: Any) -> None:
    """A non-local fsspec URL (the in-memory filesystem stands in for S3) gives the same answers."""
    local = checkpoint("join") / "checkpoint"
    _upload(local, "memory://statelens-test/join")
    try:
        remote = open_checkpoint("memory://statelens-test/join")
        here = open_checkpoint(str(local))
        assert not remote.fs.is_local and here.fs.is_local
        assert remote.query_id == here.query_id
        assert [b.batch_id for b in remote.batches] == [b.batch_id for b in here.batches]
        assert [s.store_name for s in remote.operators[0].stores] == [
            s.store_name for s in here.operators[0].stores
        ]
        for store in here.operators[0].stores:
            a = remote.store_reader(0, store.store_name)
            b = here.store_reader(0, store.store_name)
            for pid in b.partition_ids():
                v = b.versions(pid)[-1]
                assert sorted(map(repr, a.read_rows(pid, v))) == sorted(map(repr, b.read_rows(pid, v)))
        # many files at once go through the thread pool for remote storage
        paths = [e.path for e in remote.fs.walk_files("offsets")]
        got = remote.fs.read_many(paths)
        assert len(got) == len(paths) >= 4
        assert all(isinstance(v, bytes) for v in got.values())
    finally:
        fsspec.filesystem("memory").rm("/statelens-test", recursive=True)


def test_not_a_checkpoint_and_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpointError, match="no such folder"):
        CheckpointFS(str(tmp_path / "nope"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotACheckpointError, match="is a file"):
        CheckpointFS(str(tmp_path / "file"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotACheckpointError, match="not a Structured Streaming checkpoint"):
        open_checkpoint(str(tmp_path / "empty"))
    fs = CheckpointFS(str(tmp_path))
    with pytest.raises(MissingFileError) as info:
        fs.read_bytes("offsets/0")
    assert info.value.path == "offsets/0"


def test_unknown_protocol_is_a_storage_error() -> None:
    with pytest.raises(StorageError) as info:
        CheckpointFS("nosuchproto://bucket/prefix")
    assert "nosuchproto" in str(info.value)


def test_credentials_never_appear_in_errors() -> None:
    from statelens.readers.errors import StatelensError, redact

    err = StatelensError(
        "cannot read aws_secret_access_key=abc123XYZ", path="s3://AKIAxyz:secret@bucket/ckpt"
    )
    text = str(err)
    assert "abc123XYZ" not in text and "secret@" not in text and "AKIAxyz" not in text
    assert json.dumps(err.to_json()).count("***") >= 2
    assert redact("s3://user:pw@host/p token=t0k") == "s3://***@host/p token=***"


def test_listing_is_cached_and_hidden_files_are_seen(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n{}\n")
    (tmp_path / "offsets" / ".0.crc").write_bytes(b"crc\0")
    fs = CheckpointFS(str(tmp_path))
    names = sorted(e.name for e in fs.list_dir("offsets"))
    assert names == [".0.crc", "0"]
    (tmp_path / "offsets" / "1").write_text("v1\n{}\n")  # written after listing: not seen (one listing)
    assert not fs.exists("offsets/1")


@pytest.mark.spark
def test_local_listing_equals_fsspec(checkpoint: Any, tmp_path: Path) -> None:
    """The local disk is listed with ``os.scandir`` (fsspec's per-file overhead tripled the opening
    of a 13,000-file checkpoint); it lists what fsspec's ``find`` lists, links and empty folders too,
    so file identities (size, modification time) and the cache keys built from them do not change."""
    import os
    import shutil

    from statelens.readers import fs as fs_module

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_count") / "checkpoint", root)
    (root / "state" / "empty").mkdir()
    os.symlink(root / "offsets" / "0", root / "linked-file")
    os.symlink(root / "commits", root / "linked-folder")
    os.symlink(root / "gone", root / "dangling")
    ours = fs_module._local_find(str(root))
    theirs = fsspec.filesystem("file").find(str(root), withdirs=True, detail=True)
    assert {f"{root}/{rel}" for rel in ours} == set(theirs) - {str(root)}
    for rel, entry in ours.items():
        other = theirs[f"{root}/{rel}"]
        assert (entry.size_bytes, entry.version_tag) == (other["size"], f"mtime={other['mtime']}"), rel
        assert entry.is_dir == (other["type"] == "directory") and entry.path == rel, rel
        assert abs(entry.modified_ms - other["mtime"] * 1000) < 1, rel  # type: ignore[operator]
    fs = CheckpointFS(str(root))
    assert fs.entry("linked-file").size_bytes == (root / "offsets" / "0").stat().st_size
    assert not fs.is_dir("linked-folder") and fs.is_dir("state/empty")
    assert fs.read_bytes("offsets/0") == (root / "offsets" / "0").read_bytes()
    with pytest.raises(MissingFileError, match="dangling"):
        fs.read_bytes("dangling")


@pytest.mark.spark
def test_local_listing_errors_name_the_full_path(
    checkpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local listing reads each folder through a descriptor opened from the root's; a folder it
    cannot open, or an entry it cannot stat, is named by its full path (as a listing by path names it)
    in the error the opening reports, and a folder removed while listing is left out."""
    import contextlib
    import errno
    import os
    import shutil

    from statelens.readers import fs as fs_module

    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint("agg_count") / "checkpoint", root)
    real_open, real_scandir = os.open, os.scandir

    def refusing_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "state/0":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        if path == "commits":
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(fs_module.os, "open", refusing_open)
    with pytest.raises(PermissionError) as refused:
        fs_module._local_find(str(root))
    assert refused.value.filename == f"{root}/state/0" and str(refused.value).endswith(f"'{root}/state/0'")
    with pytest.raises(StorageError, match=f"PermissionError: .*{root}/state/0"):
        CheckpointFS(str(root))

    class _Refusing:
        def __init__(self, entry: Any) -> None:
            self.name = entry.name

        def stat(self, *, follow_symlinks: bool = True) -> Any:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.name)

    def scandir(fd: Any) -> Any:
        with real_scandir(fd) as it:
            return contextlib.nullcontext([_Refusing(e) if e.name == "metadata" else e for e in it])

    monkeypatch.setattr(fs_module.os, "open", real_open)
    monkeypatch.setattr(fs_module.os, "scandir", scandir)
    with pytest.raises(PermissionError) as refused:
        fs_module._local_find(str(root))
    assert refused.value.filename == f"{root}/metadata"
    monkeypatch.setattr(fs_module.os, "scandir", real_scandir)
    monkeypatch.setattr(fs_module.os, "open", refusing_open)
    shutil.rmtree(root / "state")  # only "commits" is refused now: as if removed while listing
    listed = fs_module._local_find(str(root))
    assert "commits" in listed and not any(rel.startswith("commits/") for rel in listed)
    assert "offsets/0" in listed
