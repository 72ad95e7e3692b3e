"""``readers.scan_files.StoreFiles``: a store's state files listed and checked with the scan's error policy,
on copies of real PySpark checkpoints damaged one way each (what is wrong, and where, is what the test did
to the copy)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statelens.readers.backends.native import NativeBackend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import MissingFileError, StatelensError
from statelens.readers.fs import CheckpointFS
from statelens.readers.scan_files import StoreFiles

pytestmark = pytest.mark.spark


def _copy(checkpoint: Any, name: str, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    dst = tmp_path / name
    shutil.copytree(checkpoint(name) / "checkpoint", dst)
    return dst, json.loads((checkpoint(name) / "expected.json").read_text())


def _files(root: Path, **kw: Any) -> StoreFiles:
    return StoreFiles(NativeBackend(open_checkpoint(str(root), mirror=False)), 0, "default", **kw)


def _on_disk(root: Path, pattern: str) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.glob(pattern)}


def test_a_clean_hdfs_store_lists_every_file_on_disk_and_checks_each_sound(
    checkpoint: Any, tmp_path: Path
) -> None:
    root, _ = _copy(checkpoint, "agg_many_partitions", tmp_path)
    files = _files(root)
    listed = files.state_files()
    assert {sf.path for sf in listed} == _on_disk(root, "state/0/*/*.delta") | _on_disk(
        root, "state/0/*/*.snapshot"
    )
    checks = list(files.iter_checks(listed))
    assert [c.file for c in checks] == listed
    assert [c.error for c in checks] == [None] * len(listed)
    assert files.problems == [] and files.unreadable == []
    plan = files.restart_files(0)
    assert plan.provider == "hdfs"
    assert set(plan.snapshots.values()) == _on_disk(root, "state/0/0/*.snapshot")
    assert set(plan.deltas.values()) == _on_disk(root, "state/0/0/*.delta")


def test_a_truncated_delta_comes_with_its_error_naming_it_and_goes_to_problems(
    checkpoint: Any, tmp_path: Path
) -> None:
    root, expected = _copy(checkpoint, "agg_count", tmp_path)
    last = max(expected["committed_batches"]) + 1
    delta = root / f"state/0/0/{last}.delta"
    delta.write_bytes(delta.read_bytes()[: delta.stat().st_size // 2])
    files = _files(root)
    checks = list(files.iter_checks(files.state_files(partition_id=0)))
    (bad,) = [c for c in checks if c.error is not None]
    assert bad.file.path == f"state/0/0/{last}.delta" and bad.stage == "scan"
    assert bad.error.path == bad.file.path
    assert files.problems == [bad.error]
    assert [(u.partition_id, u.version) for u in files.unreadable] == [(0, last)]
    assert files.file_of(0, bad.error) == bad.file
    strict = _files(root, strict=True)
    chosen = strict.state_files(only={bad.file.path})
    with pytest.raises(StatelensError) as raised:
        list(strict.iter_checks(chosen))
    assert raised.value.path == bad.file.path


def test_a_zip_whose_sst_is_gone_names_the_sst_and_a_planted_sst_is_an_orphan(
    checkpoint: Any, tmp_path: Path
) -> None:
    root, _ = _copy(checkpoint, "rocks_agg", tmp_path)
    files = _files(root)
    clean = list(files.iter_checks(files.state_files(partition_id=0)))
    assert [c.error for c in clean] == [None] * len(clean) and clean
    assert files.orphan_ssts(0, clean) == {}
    zips = sorted(root.glob("state/0/0/*.zip"), key=lambda p: int(p.name.split(".")[0]))
    ssts = sorted((root / "state/0/0/SSTs").glob("*.sst"))
    planted = root / "state/0/0/SSTs" / f"999999-{'0' * 8}-0000-0000-0000-{'0' * 12}.sst"
    shutil.copyfile(ssts[0], planted)
    files = _files(root)
    checks = list(files.iter_checks(files.state_files(partition_id=0)))
    assert files.orphan_ssts(0, checks) == {planted.name: planted.stat().st_size}
    named = next(c for c in checks if c.file.path == zips[-1].relative_to(root).as_posix()).sst_names
    gone = root / "state/0/0/SSTs" / sorted(named)[0]
    gone.unlink()
    files = _files(root)
    checks = list(files.iter_checks(files.state_files(partition_id=0)))
    bad = [c for c in checks if c.error is not None]
    assert bad and all(c.stage == "zip" and isinstance(c.error, MissingFileError) for c in bad)
    assert {c.error.path for c in bad} == {gone.relative_to(root).as_posix()}
    assert zips[-1].relative_to(root).as_posix() in {c.file.path for c in bad}
    assert files.orphan_ssts(0, checks) == {}  # not every zip read: which SSTs they name is not known
    assert files.file_of(0, bad[-1].error) == bad[-1].file


def test_a_store_that_cannot_be_listed_is_a_problem_not_an_empty_answer(checkpoint: Any) -> None:
    root = checkpoint("agg_count") / "checkpoint"
    backend = NativeBackend(open_checkpoint(str(root), mirror=False))
    files = StoreFiles(backend, 0, "no-such-store")
    assert files.partition_ids() == [] and files.state_files() == []
    (err,) = files.problems
    assert "no-such-store" in str(err) and files.unreadable[0].partition_id is None
    with pytest.raises(StatelensError):
        StoreFiles(backend, 0, "no-such-store", strict=True)


@pytest.fixture
def state_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """State files read (``CheckpointFS.read_bytes``), by path, from when the test clears it."""
    reads: Counter[str] = Counter()
    read_bytes = CheckpointFS.read_bytes

    def counted(self: CheckpointFS, path: str, *args: Any, **kwargs: Any) -> bytes:
        if path.startswith("state/") and "/_metadata/" not in path:
            reads[path] += 1
        return read_bytes(self, path, *args, **kwargs)

    monkeypatch.setattr(CheckpointFS, "read_bytes", counted)
    return reads


def _opened(root: Path, reads: Counter[str]) -> StoreFiles:
    """A store's files on the checkpoint opened anew (as a refresh opens it), its reads counted anew."""
    reads.clear()
    return StoreFiles(NativeBackend(open_checkpoint(str(root), mirror=False)), 0, "default")


def test_a_store_checked_again_reads_only_files_new_or_changed(
    checkpoint: Any, tmp_path: Path, state_reads: Counter[str]
) -> None:
    """The app refreshes its verdicts at every batch a followed query commits: files found sound are not
    read again while their listing entry (size, modification time) is the same; a file rewritten is."""
    root, expected = _copy(checkpoint, "agg_many_partitions", tmp_path)
    files = _opened(root, state_reads)
    listed = files.state_files()
    assert [c.error for c in files.iter_checks(listed)] == [None] * len(listed)
    assert dict(state_reads) == {sf.path: 1 for sf in listed}  # every file read once...
    files = _opened(root, state_reads)
    again = list(files.iter_checks(files.state_files()))
    assert [c.file for c in again] == listed and [c.error for c in again] == [None] * len(listed)
    assert dict(state_reads) == {}  # ...and not again
    # A delta rewritten with other bytes (cut short) is read and found damaged; the rest is not read.
    last = max(expected["committed_batches"]) + 1
    delta = root / f"state/0/1/{last}.delta"
    original = delta.read_bytes()
    delta.write_bytes(original[:20])
    rel = delta.relative_to(root).as_posix()
    files = _opened(root, state_reads)
    checks = list(files.iter_checks(files.state_files()))
    assert [c.file.path for c in checks if c.error is not None] == [rel]
    assert dict(state_reads) == {rel: 1}
    # A file at fault is checked every time: put back, it is sound again.
    files = _opened(root, state_reads)
    assert [c.file.path for c in files.iter_checks(files.state_files()) if c.error] == [rel]
    delta.write_bytes(original)
    files = _opened(root, state_reads)
    assert [c.error for c in files.iter_checks(files.state_files())] == [None] * len(listed)
    assert dict(state_reads) == {rel: 1}


def test_a_zip_checked_again_is_read_again_when_an_sst_it_names_changed(
    checkpoint: Any, tmp_path: Path, state_reads: Counter[str]
) -> None:
    root, _ = _copy(checkpoint, "rocks_agg", tmp_path)
    files = _opened(root, state_reads)
    listed = files.state_files(partition_id=0)
    clean = list(files.iter_checks(listed))
    assert [c.error for c in clean] == [None] * len(listed) and any(c.sst_names for c in clean)
    files = _opened(root, state_reads)
    again = list(files.iter_checks(files.state_files(partition_id=0)))
    assert [(c.file, c.error, c.sst_names) for c in again] == [(c.file, None, c.sst_names) for c in clean]
    assert dict(state_reads) == {}  # no zip, SST or changelog read
    assert files.orphan_ssts(0, again) == {}
    # An SST the last zip names, cut short: that zip (and any other naming it) is read and found damaged.
    last_zip = max((c for c in clean if c.file.kind == "zip"), key=lambda c: c.file.version)
    sst = root / "state/0/0/SSTs" / sorted(last_zip.sst_names)[0]
    sst.write_bytes(sst.read_bytes()[:100])
    files = _opened(root, state_reads)
    checks = list(files.iter_checks(files.state_files(partition_id=0)))
    bad = {c.file.path for c in checks if c.error is not None}
    assert bad == {c.file.path for c in clean if sst.name in c.sst_names}
    assert all(c.stage == "zip" for c in checks if c.error is not None)


def test_sidecars_checked_are_those_of_logs_schemas_zips_and_ssts(checkpoint: Any) -> None:
    """Deltas, snapshots and changelogs are read whole through their own codec checks (and Spark reads
    them unchecked): their sidecars are not read; every other file's is."""
    from statelens.readers.scan_files import iter_sidecar_checks

    for name in ("agg_count", "rocks_agg_changelog"):
        root = checkpoint(name) / "checkpoint"
        checked = [
            p for p, err in iter_sidecar_checks(open_checkpoint(str(root), mirror=False).fs) if err is None
        ]
        on_disk = {
            p.with_name(p.name[1 : -len(".crc")]).relative_to(root).as_posix()
            for p in root.rglob(".*.crc")
            if p.with_name(p.name[1 : -len(".crc")]).is_file()
        }
        state_data = {p for p in on_disk if p.endswith((".delta", ".snapshot", ".changelog"))}
        assert state_data and sorted(checked) == sorted(on_disk - state_data), name
        assert any(p.startswith("offsets/") for p in checked) and any(
            p.startswith("commits/") for p in checked
        )
        if name.startswith("rocks"):
            assert any(p.endswith(".zip") for p in checked) and any(p.endswith(".sst") for p in checked)
