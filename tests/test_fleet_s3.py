"""``statelens fleet`` on S3 (moto on loopback behind the counting proxy of ``tests/test_fs_s3.py``): a
folder's subfolders and checkpoints in one recursive listing when it takes no more pages than the folder
has subfolders, else one listing per prefix; no request per file of a data folder; the rows equal those
of the same checkpoints on local disk; a second run with nothing new makes listing requests only, and a
checkpoint whose files changed is read again."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis.fleet import fleet
from statelens.readers.discover import Discovery, iter_discover
from tests.spark_checkpoints import get_checkpoint
from tests.test_fs_s3 import ACCESS_KEY, SECRET_KEY, options

pytestmark = pytest.mark.spark

BUCKET = "statelens-fleet"
LAYOUT = {"teamA/orders": "agg_count", "teamB/sessions": "uncommitted", "teamB/leak": "pandas_state_event"}


def _put_tree(client: Any, prefix: str, folder: Path) -> None:
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            client.put_object(
                Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(folder).as_posix()}", Body=p.read_bytes()
            )


@pytest.fixture(scope="module")
def s3_fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``s3://statelens-fleet/prod``: three real checkpoints and a data folder of 120 files; the same
    tree on local disk."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    local = tmp_path_factory.mktemp("fleet-local") / "prod"
    for rel, name in LAYOUT.items():
        src = get_checkpoint(name) / "checkpoint"
        _put_tree(client, f"prod/{rel}", src)
        shutil.copytree(src, local / rel)
    events = local / "data" / "events"
    (events / "date=2024-01-01").mkdir(parents=True)
    for i in range(100):
        (events / f"part-{i:05d}.json").write_text("{}\n")
    for i in range(20):
        (events / "date=2024-01-01" / f"part-{i:05d}.json").write_text("{}\n")
    _put_tree(client, "prod/data", local / "data")
    return {"url": f"s3://{BUCKET}/prod", "local": local, "endpoint": moto_endpoint}


def _client(s3_fleet: dict[str, Any]) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3_fleet["endpoint"],
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STATELENS_RAISE", "1")
    return tmp_path / "cache"


def _lists(proxy: Any) -> int:
    return sum(1 for method, path, _ in proxy.requests if method == "GET" and "list-type=2" in path)


def _object_gets(proxy: Any) -> list[str]:
    return [path for method, path, _ in proxy.requests if method == "GET" and "list-type=2" not in path]


def test_discovery_lists_each_prefix_once(s3_fleet, proxy, fresh_cache):
    proxy.reset()
    stats = Discovery()
    found = list(iter_discover(s3_fleet["url"], options(proxy.url), stats=stats))
    assert sorted(f.path for f in found) == sorted(LAYOUT)
    assert all(f.error is None for f in found)
    # prod's folders, then prod whole in one page (under 1,000 keys): every checkpoint with its files
    assert stats.listings == 2
    assert _lists(proxy) == stats.listings
    for f in found:
        src = get_checkpoint(LAYOUT[f.path]) / "checkpoint"
        files = {p.relative_to(src).as_posix(): p.stat().st_size for p in src.rglob("*") if p.is_file()}
        assert f.entries is not None
        assert {e.path: e.size_bytes for e in f.entries} == files, f.path
    assert not [p for p in _object_gets(proxy) if "/data/" in p]  # no request per file of a data folder
    assert stats.metadata_reads == 0


def test_rows_equal_local_and_second_run_only_lists(s3_fleet, proxy, fresh_cache):
    local = {r.path: r for r in fleet(str(s3_fleet["local"])).rows}
    proxy.reset()
    first = fleet(s3_fleet["url"], options(proxy.url))
    rows = {r.path: r for r in first.rows}
    assert set(rows) == set(LAYOUT)
    for rel, row in rows.items():
        assert row.error is None, rel
        assert row.location == f"{s3_fleet['url']}/{rel}"
        assert [v.to_json() for v in row.verdicts] == [v.to_json() for v in local[rel].verdicts], rel
        assert (row.rows, row.zombies, row.last_batch) == (
            local[rel].rows,
            local[rel].zombies,
            local[rel].last_batch,
        )
    assert _object_gets(proxy)  # the first run read the checkpoints' files
    proxy.reset()
    second = fleet(s3_fleet["url"], options(proxy.url))
    assert second.cached == len(LAYOUT)
    assert _object_gets(proxy) == []  # nothing changed: listings only
    assert _lists(proxy) == 2  # prod's folders and prod whole: no listing per checkpoint
    assert [r.to_json()["verdicts"] for r in second.rows] == [r.to_json()["verdicts"] for r in first.rows]
    # a checkpoint whose files changed is read again (its last commit lost), the others are not
    client = _client(s3_fleet)
    key = "prod/teamA/orders/commits/3"
    kept = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    client.delete_object(Bucket=BUCKET, Key=key)
    try:
        third = {r.path: r for r in fleet(s3_fleet["url"], options(proxy.url)).rows}
    finally:
        client.put_object(Bucket=BUCKET, Key=key, Body=kept)
    assert [p for p, r in third.items() if not r.cached] == ["teamA/orders"]
    assert third["teamA/orders"].last_batch == 2
    assert third["teamA/orders"].uncommitted == [3]


def test_a_folder_of_more_pages_than_subfolders_is_listed_prefix_by_prefix(s3_fleet, proxy, fresh_cache):
    client = _client(s3_fleet)
    _put_tree(client, "wide/big/orders", get_checkpoint("agg_count") / "checkpoint")
    for i in range(1001):  # two pages below wide/ and wide/big/, each with one subfolder
        client.put_object(Bucket=BUCKET, Key=f"wide/big/part-{i:05d}", Body=b"")
    proxy.reset()
    stats = Discovery()
    (found,) = iter_discover(f"s3://{BUCKET}/wide", options(proxy.url), stats=stats)
    assert found.path == "big/orders" and found.entries is None  # opened with a listing of its own
    # wide, one page of it, wide/big (two pages: its 1,001 files), one page of it, wide/big/orders
    assert stats.listings == 5
    assert _lists(proxy) == 6
    (row,) = fleet(f"s3://{BUCKET}/wide", options(proxy.url)).rows
    assert row.error is None and row.last_batch == 3
