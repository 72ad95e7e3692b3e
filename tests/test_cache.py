"""The decoded-state cache: reuse, invalidation on a changed file, damaged entries, the size cap,
concurrent use by the app and the command line, and nothing ever written inside the checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from statelens.app.cli import main
from statelens.readers.cache import StateCache
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import StatelensError
from statelens.readers.lru import LRUFolder

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        st = p.stat()
        h.update(f"{p.relative_to(root)}|{p.is_dir()}|{st.st_size}|{st.st_mtime_ns}".encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _copy(checkpoint: Any, name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(checkpoint(name) / "checkpoint", root)
    return root


def _latest(reader: Any) -> tuple[int, int]:
    """The partition and version holding the most rows (watermarks may leave the latest empty)."""
    return max(
        ((p, v) for p in reader.partition_ids() for v in reader.versions(p)),
        key=lambda pv: (len(reader.read_rows(*pv)), pv[1]),
    )


def test_a_version_is_decoded_once_and_read_back(checkpoint: Any, tmp_path: Path) -> None:
    root = checkpoint("window_agg_watermark") / "checkpoint"
    before = _tree_hash(root)
    cache = StateCache(tmp_path / "cache")
    reader = open_checkpoint(str(root)).store_reader(0, None)
    pid, v = _latest(reader)
    first = reader.read_arrow(pid, v, cache=cache)
    assert (cache.hits, cache.misses) == (0, 1) and cache.info().entries == 1
    again = open_checkpoint(str(root)).store_reader(0, None).read_arrow(pid, v, cache=cache)  # a reopen
    assert (cache.hits, cache.misses) == (1, 1)
    assert again.equals(first) and again.num_rows == len(reader.read_rows(pid, v)) > 0
    # other versions and partitions are entries of their own
    reader.read_arrow(pid, reader.versions(pid)[0], cache=cache)
    assert cache.info().entries == 2
    assert _tree_hash(root) == before  # the checkpoint is evidence: nothing written inside it
    assert not any(p.is_relative_to(root) for p in (tmp_path / "cache").rglob("*"))


def test_a_changed_file_is_never_answered_from_the_cache(checkpoint: Any, tmp_path: Path) -> None:
    root = _copy(checkpoint, "agg_count", tmp_path)
    cache = StateCache(tmp_path / "cache")
    reader = open_checkpoint(str(root)).store_reader(0, None)
    pid, v = _latest(reader)
    cached = reader.read_arrow(pid, v, cache=cache)
    delta = root / "state" / "0" / str(pid) / f"{v}.delta"
    # the same bytes rewritten (a new modification time): a miss, same rows
    os.utime(delta, ns=(delta.stat().st_atime_ns, delta.stat().st_mtime_ns + 10**9))
    reread = open_checkpoint(str(root)).store_reader(0, None).read_arrow(pid, v, cache=cache)
    assert cache.misses == 2 and reread.equals(cached)
    # the file damaged after it was cached: the damage is reported, not the old rows
    delta.write_bytes(delta.read_bytes()[: delta.stat().st_size // 2])
    with pytest.raises(StatelensError, match=f"{v}.delta"):
        open_checkpoint(str(root)).store_reader(0, None).read_arrow(pid, v, cache=cache)


def test_a_damaged_entry_is_rebuilt_never_shown(checkpoint: Any, tmp_path: Path) -> None:
    root = checkpoint("agg_count") / "checkpoint"
    cache = StateCache(tmp_path / "cache")
    reader = open_checkpoint(str(root)).store_reader(0, None)
    pid, v = _latest(reader)
    want = reader.read_arrow(pid, v, cache=cache)
    (entry,) = (tmp_path / "cache").rglob("*.parquet")

    def flip(b: bytes) -> bytes:  # one bit in the first data page (after the 4-byte magic and page header)
        at = 40
        return b[:at] + bytes([b[at] ^ 0x10]) + b[at + 1 :]

    for damage in (
        lambda b: b[: len(b) // 2],
        lambda b: b[:8] + bytes(len(b) - 16) + b[-8:],
        lambda b: b"",
        flip,
    ):
        entry.write_bytes(damage(entry.read_bytes()))  # the entry written again by the read before
        got = reader.read_arrow(pid, v, cache=cache)
        assert got.equals(want)
        assert entry.stat().st_size > 0
    assert cache.rebuilt == 4 and cache.hits == 0
    # an entry of other columns under the same name (another statelens' layout) is not shown either
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), entry)
    assert reader.read_arrow(pid, v, cache=cache).equals(want) and cache.rebuilt == 5


def test_the_size_cap_evicts_least_recently_used(checkpoint: Any, tmp_path: Path) -> None:
    root = checkpoint("agg_many_partitions") / "checkpoint"
    reader = open_checkpoint(str(root)).store_reader(0, None)
    probe = StateCache(tmp_path / "probe")
    pids = reader.partition_ids()[:6]
    for pid in pids:
        reader.read_arrow(pid, reader.versions(pid)[-1], cache=probe)
    sizes = sorted(p.stat().st_size for p in (tmp_path / "probe").rglob("*.parquet"))
    cap = sum(sizes[-3:]) + 1  # room for three entries at least
    cache = StateCache(tmp_path / "cache", max_bytes=cap)
    for i, pid in enumerate(pids):
        reader.read_arrow(pid, reader.versions(pid)[-1], cache=cache)
        if i == 1:
            os.utime(next(iter((tmp_path / "cache").rglob("*.parquet"))), (1, 1))  # make one entry the oldest
        if i >= 2:  # keep the first partition in use: it survives
            reader.read_arrow(pids[0], reader.versions(pids[0])[-1], cache=cache)
    info = cache.info()
    assert info.bytes <= cap and 1 <= info.entries < len(pids)
    hits = cache.hits
    reader.read_arrow(pids[0], reader.versions(pids[0])[-1], cache=cache)
    assert cache.hits == hits + 1  # the recently used entry is still there
    assert cache.clear() == info.entries and cache.info().entries == 0


@pytest.mark.spark
def test_writes_scan_the_folder_only_when_the_cap_may_be_passed(
    checkpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder is scanned for its size at the first write, then only when this process' writes may
    have passed the cap (or after ``readers.lru.RESCAN_S``): decoding many partitions does not rescan it every time."""
    reader = open_checkpoint(str(checkpoint("agg_many_partitions") / "checkpoint")).store_reader(0, None)
    scans = []
    original = LRUFolder.entries
    monkeypatch.setattr(LRUFolder, "entries", lambda self: scans.append(1) or original(self))
    cache = StateCache(tmp_path / "cache", max_bytes=1 << 30)
    pids = reader.partition_ids()
    for pid in pids:
        reader.read_arrow(pid, reader.versions(pid)[-1], cache=cache)
    assert len(pids) > 3 and len(scans) == 1
    assert cache.info().entries == len(pids)
    # past the cap, a write evicts at once (the estimate counts this process' writes)
    cache.max_bytes = cache.info().bytes // 2
    reader.read_arrow(pids[0], reader.versions(pids[0])[-1] - 1, cache=cache)
    assert cache.info().bytes <= cache.max_bytes


def test_the_app_and_the_command_line_share_the_cache(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads (an app's workers) and a separate statelens process fill and read the same entries."""
    root = checkpoint("agg_many_partitions") / "checkpoint"
    folder = tmp_path / "cache"
    query = "SELECT partition_id, count(*) AS n FROM state GROUP BY 1 ORDER BY 1"
    env = {**os.environ, "STATELENS_CACHE_DIR": str(folder)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statelens.app.cli", "sql", str(root), "--json", query],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reader = open_checkpoint(str(root)).store_reader(0, None)
    cache = StateCache(folder)
    errors: list[BaseException] = []
    counts: dict[int, int] = {}

    def work() -> None:
        try:
            for pid in reader.partition_ids():
                counts[pid] = reader.read_arrow(
                    pid, reader.versions(pid)[-1], unique_names=True, cache=cache
                ).num_rows
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert not errors
    assert {d["partition_id"]: d["n"] for d in json.loads(out)} == {p: n for p, n in counts.items() if n}
    assert not list(folder.rglob(".tmp-*"))  # no half-written entry left behind
    # the command line with the cache, again: every entry is a hit, the same answer
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(folder))
    assert main(["sql", str(root), "--json", query]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(out)


def test_no_cache_keeps_nothing(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    root = str(checkpoint("agg_count") / "checkpoint")
    assert main(["sql", root, "--no-cache", "--json", "SELECT count(*) AS n FROM state"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["n"] > 0
    assert not (tmp_path / "cache").exists()
    assert main(["sql", root, "--json", "SELECT count(*) AS n FROM state"]) == 0
    capsys.readouterr()
    assert list((tmp_path / "cache").rglob("*.parquet"))


def test_cache_info_and_clear_commands(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "path": str(tmp_path / "cache"),
        "entries": 0,
        "bytes": 0,
        "max_bytes": 4 << 30,
        "mirror": {"path": str(tmp_path / "cache" / "files"), "files": 0, "bytes": 0, "max_bytes": 4 << 30},
    }
    assert main(["sql", str(checkpoint("agg_count") / "checkpoint"), "SELECT count(*) FROM state"]) == 0
    capsys.readouterr()
    assert main(["cache", "info"]) == 0
    text = capsys.readouterr().out
    assert str(tmp_path / "cache") in text and "entries 2" in text and "MiB of 4.0 GiB" in text
    assert main(["cache", "clear", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["removed"] == 2 and doc["entries"] == 0 and doc["bytes"] == 0
