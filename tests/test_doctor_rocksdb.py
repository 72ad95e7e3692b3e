"""``statelens doctor`` on damaged RocksDB checkpoints: what a restart loads is an error (exit 2), other
retained versions a warning (exit 1), orphan SSTs a note; every copy starts from a real PySpark
checkpoint and the original is never written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.doctor import iter_doctor
from statelens.app.cli import main
from statelens.readers._format.rocksdb_store import parse_zip_metadata, read_zip
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.restart import REPAIR_ENABLED, RestartConf
from tests.test_analysis_doctor import _tree_hash

pytestmark = pytest.mark.spark


def _copy(checkpoint: Any, name: str, tmp_path: Path) -> tuple[Path, int]:
    """A copy of the scenario and the version a restart loads (last committed batch + 1)."""
    dst = tmp_path / name
    shutil.copytree(checkpoint(name) / "checkpoint", dst)
    expected = json.loads((checkpoint(name) / "expected.json").read_text())
    return dst, max(expected["committed_batches"]) + 1


#: A restart without auto snapshot repair: its first snapshot failure is final.
NO_REPAIR = ["--spark-version", "4.3", "--conf", f"{REPAIR_ENABLED}=false"]


def _doctor(path: Path, restart: RestartConf | None = None) -> Any:
    return run_to_end(iter_doctor(open_checkpoint(str(path)), restart=restart))


def _named(result: Any, check: str) -> list[Any]:
    return [f for f in result.findings if f.check == check]


def _file(part: Path, version: int, kind: str) -> Path:
    (found,) = [p for p in part.glob(f"{version}*.{kind}")]  # checkpoint v2 names carry a unique id
    return found


def _restart_zip(part: Path, restart: int) -> int:
    return max(
        int(p.name.split(".")[0].split("_")[0])
        for p in part.glob("*.zip")
        if int(p.name.split(".")[0].split("_")[0]) <= restart
    )


def _ssts_of(zip_path: Path) -> list[tuple[str, int]]:
    from statelens.readers._format.rocksdb_store import ZipLimits

    entries = read_zip(zip_path.read_bytes(), str(zip_path), ZipLimits())
    return [(dfs, size) for _, dfs, size in parse_zip_metadata(entries["metadata"], str(zip_path)).sst_files]


@pytest.mark.parametrize(
    "name", ["rocks_agg", "rocks_agg_changelog", "rocks_ckpt_v2", "rocks_tws_timers", "rocks_join_v4"]
)
def test_clean_rocksdb_checkpoints_pass_every_file_check(
    checkpoint: Any, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoint(name) / "checkpoint"
    before = _tree_hash(root)
    assert main(["doctor", str(root)]) == 0
    out = capsys.readouterr().out
    assert "OK: no problems found." in out
    result = _doctor(root)
    assert any(c.startswith("RocksDB: the zip, SSTs and changelogs a restart loads") for c in result.checked)
    assert _tree_hash(root) == before


@pytest.mark.parametrize("name", ["rocks_agg", "rocks_ckpt_v2", "rocks_tws"])
def test_a_missing_sst_of_the_restart_zip_is_an_error_naming_it(
    checkpoint: Any, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root, restart = _copy(checkpoint, name, tmp_path)
    part = root / "state" / "0" / "0"
    zip_version = _restart_zip(part, restart)
    sst, _ = _ssts_of(_file(part, zip_version, "zip"))[0]
    (part / "SSTs" / sst).unlink()
    assert main(["doctor", str(root), *NO_REPAIR]) == 2
    out = capsys.readouterr().out
    assert f"state/0/0/SSTs/{sst}" in out and "The restart will fail" in out
    (f,) = _named(_doctor(root, RestartConf.parse("4.3", {REPAIR_ENABLED: "false"})), "rocksdb_restart_zip")
    assert f.severity == "error" and f.partition == 0 and f.files == (f"state/0/0/SSTs/{sst}",)
    assert "MissingFileError" in f.message and f"loads version {restart}" in f.message


def test_a_missing_sst_without_changelogs_fails_even_with_repair(checkpoint: Any, tmp_path: Path) -> None:
    """Auto snapshot repair rebuilds from changelogs: a store that writes none cannot use it."""
    root, restart = _copy(checkpoint, "rocks_agg", tmp_path)
    part = root / "state" / "0" / "0"
    assert not list(part.glob("*.changelog"))
    sst, _ = _ssts_of(_file(part, _restart_zip(part, restart), "zip"))[0]
    (part / "SSTs" / sst).unlink()
    for conf in (RestartConf(), RestartConf.parse("4.3")):
        (f,) = _named(_doctor(root, conf), "rocksdb_restart_zip")
        assert f.severity == "error" and f.files == (f"state/0/0/SSTs/{sst}",)


def test_a_missing_sst_with_changelogs_depends_on_auto_snapshot_repair(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark 4.1+ skips a newest zip it cannot load and replays changelogs from an older one (the
    restart matrix shows Spark doing it); Spark 3.5 fails on it."""
    root, restart = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    part = root / "state" / "0" / "0"
    zips = sorted(
        int(p.name.split(".")[0]) for p in part.glob("*.zip") if int(p.name.split(".")[0]) <= restart
    )
    assert len(zips) >= 2 and all(v in range(1, restart + 1) for v in zips)
    newest = zips[-1]
    sst, _ = _ssts_of(_file(part, newest, "zip"))[-1]
    (part / "SSTs" / sst).unlink()
    # zips share SSTs: every zip naming the missing one fails to load, repair skips them all
    naming = [v for v in reversed(zips) if sst in {n for n, _ in _ssts_of(_file(part, v, "zip"))}]
    fallback = next((v for v in reversed(zips) if v not in naming), 0)
    unknown = _doctor(root)
    (f,) = _named(unknown, "restart_snapshot_repair")
    assert f.severity == "warning" and f.files == tuple(f"state/0/0/{v}.zip" for v in naming)
    assert unknown.exit_code == 1
    assert "on Spark 3.x and 4.0" in f.message and "the restart fails on" in f.message
    head = f"zip {fallback}" if fallback else "the empty state"
    assert f"falling back to {head} + changelogs {fallback + 1}-{restart}" in f.message
    assert main(["summary", str(root), "--spark-version", "4.3", "--json"]) == 1
    verdicts = json.loads(capsys.readouterr().out)["verdicts"]
    (restart_verdict,) = [v for v in verdicts if v["check"] == "restart"]
    assert restart_verdict["severity"] == "ok" and "through auto snapshot repair" in restart_verdict["text"]
    assert main(["summary", str(root), "--spark-version", "3.5", "--json"]) == 1
    verdicts = json.loads(capsys.readouterr().out)["verdicts"]
    (restart_verdict,) = [v for v in verdicts if v["check"] == "restart"]
    assert restart_verdict["severity"] == "error" and f"SSTs/{sst}" in " ".join(restart_verdict["files"])
    # the first look (the latest versions' files only) judges the same damage the same way
    for version, severity in ((None, "warning"), ("4.3", "ok"), ("3.5", "error")):
        flags = ["--spark-version", version] if version else []
        main(["summary", str(root), "--latest", "--json", *flags])
        verdicts = json.loads(capsys.readouterr().out)["verdicts"]
        (first,) = [v for v in verdicts if v["check"] == "restart"]
        assert first["severity"] == severity, (version, first["text"])


def test_a_truncated_sst_is_an_error_with_both_sizes(checkpoint: Any, tmp_path: Path) -> None:
    root, restart = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    part = root / "state" / "0" / "1"
    sst, size = _ssts_of(_file(part, _restart_zip(part, restart), "zip"))[-1]
    (part / "SSTs" / sst).write_bytes((part / "SSTs" / sst).read_bytes()[: size // 2])
    result = _doctor(root, RestartConf.parse("3.5"))
    (f,) = _named(result, "rocksdb_restart_zip")
    assert "TruncatedFileError" in f.message and str(size) in f.message and str(size // 2) in f.message
    assert result.exit_code == 2


def test_a_truncated_older_changelog_is_a_warning(
    checkpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, restart = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    part = root / "state" / "0" / "0"
    zip_version = _restart_zip(part, restart)
    old = max(
        int(p.name.split(".")[0])
        for p in part.glob("*.changelog")
        if int(p.name.split(".")[0]) <= zip_version
    )
    path = _file(part, old, "changelog")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert main(["doctor", str(root)]) == 1
    capsys.readouterr()
    result = _doctor(root)
    (f,) = _named(result, "rocksdb_changelog")
    assert f.severity == "warning" and f.files == (f"state/0/0/{path.name}",)
    assert f"retained version {old}" in f.message and f"loads version {restart}" in f.message
    assert "versions still readable" in f.message and not _named(result, "rocksdb_restart_changelog")


def test_a_truncated_changelog_on_the_restart_path_is_an_error(checkpoint: Any, tmp_path: Path) -> None:
    root, restart = _copy(checkpoint, "rocks_agg_changelog", tmp_path)
    part = root / "state" / "0" / "1"
    if _restart_zip(part, restart) == restart:  # then the restart starts from an older zip and replays this
        _file(part, restart, "zip").unlink()
    path = _file(part, restart, "changelog")
    path.write_bytes(path.read_bytes()[:-7])
    result = _doctor(root)
    (f,) = _named(result, "rocksdb_restart_changelog")
    assert f.severity == "error" and f.files == (f"state/0/1/{path.name}",) and result.exit_code == 2


def test_an_empty_older_zip_is_a_warning_and_names_what_still_reads(checkpoint: Any, tmp_path: Path) -> None:
    root, restart = _copy(checkpoint, "rocks_agg", tmp_path)
    part = root / "state" / "0" / "0"
    old = min(int(p.name.split(".")[0]) for p in part.glob("*.zip"))
    _file(part, old, "zip").write_bytes(b"")
    result = _doctor(root)
    (f,) = _named(result, "rocksdb_zip")
    assert f.severity == "warning" and f.files == (f"state/0/0/{old}.zip",) and result.exit_code == 1
    assert str(restart) in f.message.split("versions still readable:")[1]


def test_an_orphan_sst_is_a_note_with_its_bytes(checkpoint: Any, tmp_path: Path) -> None:
    root, _ = _copy(checkpoint, "rocks_agg", tmp_path)
    ssts = root / "state" / "0" / "0" / "SSTs"
    orphan = "000999-00000000-0000-0000-0000-000000000000.sst"
    (ssts / orphan).write_bytes(next(ssts.glob("*.sst")).read_bytes())
    result = _doctor(root)
    (f,) = _named(result, "rocksdb_orphan_sst")
    assert f.severity == "info" and f.files == (f"state/0/0/SSTs/{orphan}",)
    assert f"{(ssts / orphan).stat().st_size:,} bytes" in f.message and result.exit_code == 0


def _unmatch_sidecar(path: Path) -> None:
    """The Hadoop checksum beside ``path`` no longer matching it (its first CRC changed): what a file
    changed after Spark wrote it shows, the file itself left as it was."""
    crc = path.with_name(f".{path.name}.crc")
    data = bytearray(crc.read_bytes())
    data[8] ^= 0xFF
    crc.write_bytes(bytes(data))


@pytest.mark.parametrize("what", ["zip", "sst", "older zip"])
def test_a_zip_or_sst_that_does_not_match_its_checksum_fails_the_restart_that_loads_it(
    checkpoint: Any, tmp_path: Path, what: str
) -> None:
    """A restart copies a zip and its SSTs through Hadoop's ``FileSystem``, which checks the sidecar:
    ``ChecksumException: Checksum error: file:<checkpoint>/state/0/0/7.zip at 2048`` (the restart
    matrix's ``rocks/newest-zip-bitflip``). The zip and SSTs still open in RocksDB: only the sidecar
    tells."""
    root, restart = _copy(checkpoint, "rocks_agg", tmp_path)
    part = root / "state" / "0" / "0"
    loaded = _restart_zip(part, restart)
    zip_path = _file(part, loaded if what != "older zip" else loaded - 1, "zip")
    target = part / "SSTs" / _ssts_of(zip_path)[0][0] if what == "sst" else zip_path
    _unmatch_sidecar(target)
    result = _doctor(root)
    rel = target.relative_to(root).as_posix()
    found = [f for f in result.findings if rel in f.files]
    assert len(found) == 1, [(f.check, f.files) for f in result.findings]
    f = found[0]
    assert f.files[0] == rel and f.partition == 0, f
    assert "does not match its Hadoop checksum" in f.message and "ChecksumException" in f.message
    if what == "older zip":  # a restart does not load it
        assert (f.check, f.severity, result.exit_code) == ("rocksdb_checksum", "warning", 1)
    else:  # no changelogs: nothing to repair from
        assert (f.check, f.severity, result.exit_code) == ("rocksdb_restart_checksum", "error", 2)
        assert f"loads version {restart}" in f.message and "The restart will fail" in f.message
