"""A checkpoint read while a query writes it: files that appear, are renamed from ``.tmp`` into place, or
vanish between the listing and the read, driven deterministically (the race is placed between the
watcher's listing and its reads by wrapping the listing), on local disk and on moto's S3 server.

Whatever happens, no traceback and no wrong number: a batch is reported once its files can all be read,
with the rows and zombies the writing query recorded (``tests/test_watch.py``).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis.watch import Watcher
from tests.test_fs_s3 import ACCESS_KEY, SECRET_KEY, options
from tests.test_watch import batch_steps, check_batch, copy_files, file_batch, grow_to

SCENARIO = "pandas_state_event"


@pytest.fixture
def grown(checkpoint: Callable[[str], Path], tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """``(source, copy, expected)``: a copy of the scenario holding batches 0..2."""
    folder = checkpoint(SCENARIO)
    dst = tmp_path / "ckpt"
    grow_to(folder / "checkpoint", dst, 2)
    return folder / "checkpoint", dst, json.loads((folder / "expected.json").read_text())


def after_listing(watcher: Watcher, action: Callable[[], None]) -> None:
    """Run ``action`` once, right after the watcher's next listing (before it reads anything)."""
    assert watcher.ckpt is not None
    fs = watcher.ckpt.fs
    relist = fs.relist

    def once() -> None:
        relist()
        fs.relist = relist  # type: ignore[method-assign]
        action()

    fs.relist = once  # type: ignore[method-assign]


def first_polls(watcher: Watcher, expected: dict[str, Any]) -> Any:
    batches = watcher.poll().batches
    assert [b.batch_id for b in batches] == [0, 1, 2]
    return batches[-1]


@pytest.mark.spark
def test_tmp_files_renamed_into_place(grown: tuple[Path, Path, dict[str, Any]]) -> None:
    src, dst, expected = grown
    watcher = Watcher(str(dst), from_batch=0)
    before = first_polls(watcher, expected)
    copy_files(src, dst, lambda rel: rel == "offsets/3")
    # Spark writes each delta as a hidden temp file and renames it; one is cut short as it is written.
    tmps = {}
    for pid in (0, 1):
        final = dst / f"state/0/{pid}/4.delta"
        data = (src / f"state/0/{pid}/4.delta").read_bytes()
        tmp = final.parent / f".4.delta.{uuid.uuid4()}.tmp"
        tmp.write_bytes(data[: len(data) // 2] if pid == 0 else data)
        tmps[pid] = (tmp, final, data)
    poll = watcher.poll()
    assert poll.batches == []
    assert not [f for b in poll.batches for f in b.findings]
    # Partition 1's delta is in place and the commit is listed, partition 0's is still a temp file.
    tmps[1][0].rename(tmps[1][1])
    copy_files(src, dst, lambda rel: rel == "commits/3")
    poll = watcher.poll()
    assert poll.batches == []
    assert any("partition 0 has no version 4" in w for w in poll.waiting)
    tmp, final, data = tmps[0]
    tmp.write_bytes(data)
    tmp.rename(final)
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == [3]
    check_batch(poll.batches[0], expected, before)


@pytest.mark.spark
def test_state_file_vanishing_between_listing_and_read(grown: tuple[Path, Path, dict[str, Any]]) -> None:
    src, dst, expected = grown
    watcher = Watcher(str(dst), from_batch=0)
    before = first_polls(watcher, expected)
    for step in batch_steps(src, dst, 3):
        step()
    moved = dst / "state/0/1/4.delta"
    aside = dst.parent / "aside.delta"
    after_listing(watcher, lambda: shutil.move(moved, aside))
    poll = watcher.poll()
    assert poll.batches == []
    assert any("4.delta" in w for w in poll.waiting)
    shutil.move(aside, moved)
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == [3]
    check_batch(poll.batches[0], expected, before)
    # The partition read again holds the same history: the next batch is right too.
    for step in batch_steps(src, dst, 4):
        step()
    (batch,) = watcher.poll().batches
    check_batch(batch, expected, poll.batches[0])


@pytest.mark.spark
def test_commit_vanishing_between_listing_and_read(grown: tuple[Path, Path, dict[str, Any]]) -> None:
    src, dst, expected = grown
    watcher = Watcher(str(dst), from_batch=0)
    before = first_polls(watcher, expected)
    for step in batch_steps(src, dst, 3):
        step()
    commit = dst / "commits/3"
    data = commit.read_bytes()
    after_listing(watcher, commit.unlink)
    poll = watcher.poll()
    assert poll.batches == []
    assert any("commits/3" in w for w in poll.waiting)
    commit.write_bytes(data)
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == [3]
    check_batch(poll.batches[0], expected, before)


# -- S3 -------------------------------------------------------------------------------------------------
def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )


@pytest.mark.spark
def test_s3_objects_appearing_and_listed_before_they_can_be_read(
    checkpoint: Callable[[str], Path], moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATELENS_MIRROR", "0")
    folder = checkpoint(SCENARIO)
    src = folder / "checkpoint"
    expected = json.loads((folder / "expected.json").read_text())
    client = _client(moto_endpoint)
    bucket, prefix = "statelens-live", f"q-{uuid.uuid4().hex[:8]}"
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass

    def put(keep: Callable[[str], bool]) -> list[str]:
        done = []
        for p in sorted(src.rglob("*")):
            rel = p.relative_to(src).as_posix()
            if p.is_file() and keep(rel):
                client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=p.read_bytes())
                done.append(rel)
        return done

    put(lambda rel: (b := file_batch(rel)) is None or b <= 2)
    watcher = Watcher(f"s3://{bucket}/{prefix}", options(moto_endpoint), from_batch=0)
    batches = watcher.poll().batches
    assert [b.batch_id for b in batches] == [0, 1, 2]
    before = batches[-1]
    assert watcher.ckpt is not None
    fetched_before = dict(watcher.ckpt.fs.fetched)
    # Batch 3 uploaded in Spark's order, polled after each step.
    for n, keep in enumerate(
        (
            lambda rel: rel == "offsets/3",
            lambda rel: rel.startswith("state/") and file_batch(rel) == 3,
            lambda rel: rel == "commits/3",
        )
    ):
        assert put(keep)
        poll = watcher.poll()
        assert [b.batch_id for b in poll.batches] == ([3] if n == 2 else [])
    check_batch(poll.batches[0], expected, before)
    # The commit time is the commit object's LastModified, as S3 itself answers for it (whole seconds).
    uploaded = client.head_object(Bucket=bucket, Key=f"{prefix}/commits/3")["LastModified"]
    assert poll.batches[0].commit_time_ms == int(uploaded.timestamp() * 1000)
    # Only what batch 3 wrote was read, each file once: its log files and the deltas of version 4.
    fetched = watcher.ckpt.fs.fetched
    new_reads = {p: n - fetched_before.get(p, 0) for p, n in fetched.items() if n != fetched_before.get(p, 0)}
    assert new_reads == {p: 1 for p in ("offsets/3", "commits/3", "state/0/0/4.delta", "state/0/1/4.delta")}
    before = poll.batches[0]
    # Batch 4: a delta is listed, then gone when it is read (a GET after the listing answers 404).
    put(lambda rel: file_batch(rel) == 4)
    key = f"{prefix}/state/0/0/5.delta"
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    after_listing(watcher, lambda: client.delete_object(Bucket=bucket, Key=key))
    poll = watcher.poll()
    assert poll.batches == []
    assert any("5.delta" in w for w in poll.waiting)
    client.put_object(Bucket=bucket, Key=key, Body=body)
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == [4]
    check_batch(poll.batches[0], expected, before)


@pytest.mark.spark
def test_a_listing_that_fails_is_tried_again_at_the_next_poll(
    grown: tuple[Path, Path, dict[str, Any]],
) -> None:
    from statelens.readers.errors import StorageError

    src, dst, expected = grown
    watcher = Watcher(str(dst), from_batch=0)
    before = first_polls(watcher, expected)
    for step in batch_steps(src, dst, 3):
        step()
    assert watcher.ckpt is not None
    fs = watcher.ckpt.fs
    relist = fs.relist

    def fail() -> None:
        fs.relist = relist  # type: ignore[method-assign]
        raise StorageError("listing failed: connection reset (after 5 attempts)", path=str(dst))

    fs.relist = fail  # type: ignore[method-assign]
    poll = watcher.poll()
    assert poll.batches == []
    assert "could not be listed" in poll.status
    poll = watcher.poll()
    assert [b.batch_id for b in poll.batches] == [3]
    check_batch(poll.batches[0], expected, before)


@pytest.mark.spark
def test_a_damaged_delta_is_reported_as_damage_not_waited_for(
    grown: tuple[Path, Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    from statelens.app.cli import main

    src, dst, expected = grown
    watcher = Watcher(str(dst), from_batch=0)
    first_polls(watcher, expected)
    for step in batch_steps(src, dst, 3):
        step()
    delta = dst / "state/0/1/4.delta"
    data = delta.read_bytes()
    delta.write_bytes(data[: len(data) - 7])  # cut short, as a crash mid-write would leave it
    poll = watcher.poll()
    (batch,) = poll.batches
    assert batch.batch_id == 3
    (store,) = batch.stores
    assert store.rows is None and store.zombies is None
    (finding,) = [f for f in batch.findings if f.severity == "error"]
    assert "state/0/1/4.delta" in finding.files
    # Nothing rebuilds partition 1 after it (no snapshot): the next batch cannot count it either.
    for step in batch_steps(src, dst, 4):
        step()
    (batch,) = watcher.poll().batches
    assert batch.stores[0].rows is None
    # The doctor's exit code: an unreadable state file is an error.
    rc = main(["watch", str(dst), "--from-batch", "3", "--until-batch", "3"])
    out = capsys.readouterr().out
    assert rc == 2
    assert "rows ?" in out
    assert "ERROR" in out
