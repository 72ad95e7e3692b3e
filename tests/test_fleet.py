"""``statelens fleet``: a tree of real checkpoints of every kind the suite writes (links to the cached ones,
Spark 4.3, 3.4 and 3.5, HDFS and RocksDB, leaking and clean, uncommitted), damaged copies (a real file
damaged), a query that never ran a batch, and folders that are not checkpoints (data folders with many
files, a ``metadata`` file without a query id, a lone ``offsets/``, a checkpoint deeper than
``--max-depth``, a folder that cannot be listed).

Each row's verdicts are compared with ``statelens summary --latest --json`` run on that checkpoint (two
consumers of the same verdict code), and a few values with what the writing query recorded
(``expected.json``) or with the files read here by ``json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import statelens
from statelens.app.analysis import fleet_row as fleet_module
from statelens.app.analysis.fleet import FleetOptions, FleetRow, MemoryBudget, compare, fleet
from statelens.app.api import FLEET_COLUMNS
from statelens.app.cli import main
from statelens.readers.discover import Discovery, iter_discover
from statelens.readers.errors import UsageError
from tests.spark_checkpoints import SCENARIOS, get_checkpoint
from tests.spark_versions import VERSIONED_SCENARIOS, WRITER_VERSIONS, versioned_checkpoint
from tests.test_analysis_expired import _expected_zombies

pytestmark = pytest.mark.spark

DATA_FILES = 400


def _scenario(version: str, name: str) -> Path:
    return get_checkpoint(name) if version == "4.3" else versioned_checkpoint(version, name)


def _truncate_newest_delta(ckpt: Path) -> str:
    """Cut the newest delta of partition 0 to 30 bytes: the file a restart loads last."""
    deltas = sorted((ckpt / "state" / "0" / "0").glob("*.delta"), key=lambda p: int(p.stem))
    newest = deltas[-1]
    newest.write_bytes(newest.read_bytes()[:30])
    return newest.relative_to(ckpt).as_posix()


def _is_checkpoint(folder: Path) -> bool:
    """The rule of ``docs/fleet.md``, read here with ``json``: offsets/ and commits/, or a metadata file
    with a query id."""
    if (folder / "offsets").is_dir() and (folder / "commits").is_dir():
        return True
    meta = folder / "metadata"
    if meta.is_file():
        try:
            return bool(json.loads(meta.read_text().splitlines()[0]).get("id"))
        except (ValueError, IndexError, AttributeError):
            return False
    return False


def _folders_listed(root: Path, max_depth: int) -> int:
    """Folders a search lists: every folder down to ``max_depth`` that is not inside a checkpoint."""
    n = 0
    stack = [(root, 0)]
    seen = {os.path.realpath(root)}
    while stack:
        folder, depth = stack.pop()
        n += 1
        if _is_checkpoint(folder) or depth >= max_depth:
            continue
        try:
            subs = sorted(p for p in folder.iterdir() if p.is_dir())
        except OSError:
            continue
        for sub in subs:
            real = os.path.realpath(sub)
            if real not in seen:
                seen.add(real)
                stack.append((sub, depth + 1))
    return n


def _fingerprint(folders: list[Path]) -> dict[str, tuple[int, int, str]]:
    out = {}
    for top in folders:
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                p = Path(dirpath) / name
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fleet") / "prod"
    expected: dict[str, Path] = {}  # relative path -> the scenario folder (expected.json beside it)
    for name in SCENARIOS:
        expected[f"spark43/{name}"] = _scenario("4.3", name)
    for version in WRITER_VERSIONS:
        for name in VERSIONED_SCENARIOS:
            expected[f"spark{version.replace('.', '')[:2]}/{name}"] = _scenario(version, name)
    for rel, folder in expected.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(folder / "checkpoint", target_is_directory=True)
    agg = get_checkpoint("agg_count") / "checkpoint"
    # damaged copies of a real checkpoint
    shutil.copytree(agg, root / "damaged" / "truncated_delta")
    damaged_file = _truncate_newest_delta(root / "damaged" / "truncated_delta")
    shutil.copytree(agg, root / "damaged" / "bad_offsets")
    offsets = root / "damaged" / "bad_offsets" / "offsets" / "3"
    offsets.write_bytes(offsets.read_bytes()[:20])
    # a query that has not planned a batch yet: Spark's metadata file alone
    (root / "fresh" / "never_ran").mkdir(parents=True)
    shutil.copy(agg / "metadata", root / "fresh" / "never_ran" / "metadata")
    # not checkpoints
    events = root / "data" / "events"
    events.mkdir(parents=True)
    for i in range(DATA_FILES):
        (events / f"part-{i:05d}.json").write_text("{}\n")
    for day in ("2024-01-01", "2024-01-02", "2024-01-03"):
        (events / f"date={day}").mkdir()
        for i in range(20):
            (events / f"date={day}" / f"part-{i:05d}.parquet").write_bytes(b"PAR1")
    (root / "data" / "table").mkdir()
    (root / "data" / "table" / "metadata").write_text('{"format": "parquet"}\n')
    (root / "data" / "table" / "_delta_log").mkdir()
    (root / "half" / "offsets").mkdir(parents=True)
    shutil.copy(agg / "offsets" / "0", root / "half" / "offsets" / "0")
    (root / "notes").mkdir()
    (root / "notes" / "README.txt").write_text("not a checkpoint\n")
    deep = root / "deep" / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    shutil.copytree(agg, deep / "agg")
    # a folder that cannot be listed: a link to itself inside it
    (root / "broken").mkdir()
    (root / "broken" / "loop").symlink_to(root / "broken" / "loop")
    found = {
        **{rel: folder / "checkpoint" for rel, folder in expected.items()},
        "damaged/truncated_delta": root / "damaged" / "truncated_delta",
        "damaged/bad_offsets": root / "damaged" / "bad_offsets",
        "fresh/never_ran": root / "fresh" / "never_ran",
    }
    return {"root": root, "expected": expected, "found": found, "damaged_file": damaged_file}


@pytest.fixture
def row_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of this test's own (rows, decoded state)."""
    monkeypatch.setenv("STATELENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STATELENS_RAISE", "1")  # a bug inside a row raises instead of becoming the row
    return tmp_path / "cache"


def _summary_latest(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["summary", "--latest", "--json", url])
    return code, json.loads(capsys.readouterr().out)


# -- discovery -----------------------------------------------------------------------------------------
def test_every_checkpoint_found_once_and_nothing_else(tree, row_cache):
    stats = Discovery()
    found = list(iter_discover(str(tree["root"]), stats=stats))
    paths = [f.path for f in found if f.error is None]
    assert sorted(paths) == sorted(tree["found"])
    assert len(paths) == len(set(paths)) == 56
    errors = [f for f in found if f.error is not None]
    assert [f.path for f in errors] == ["broken"]
    assert "broken/loop" in str(errors[0].error)
    # one listing per folder searched; data folders listed once each, never a request per file
    assert stats.listings == _folders_listed(tree["root"], 6)
    assert stats.metadata_reads == 2  # data/table (no query id) and fresh/never_ran
    assert all(Path(f.url) == tree["root"] / f.path for f in found)


def test_max_depth_bounds_the_search(tree, row_cache):
    shallow = {f.path for f in iter_discover(str(tree["root"]))}
    deeper = {f.path for f in iter_discover(str(tree["root"]), max_depth=8)}
    assert "deep/a/b/c/d/e/f/agg" not in shallow
    assert deeper - shallow == {"deep/a/b/c/d/e/f/agg"}
    stats = Discovery()
    top = list(iter_discover(str(tree["root"]), max_depth=1, stats=stats))
    assert [(f.path, f.error is not None) for f in top] == [("broken", True)]  # level 1 listed, not below
    assert stats.listings == _folders_listed(tree["root"], 1)


def test_a_checkpoint_root_is_one_row(tree, row_cache):
    agg = tree["found"]["spark43/agg_count"]
    (found,) = iter_discover(str(agg))
    assert found.path == ""
    assert found.error is None


# -- rows ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_rows_equal_summary_latest_and_the_writing_query(tree, row_cache, capsys):
    before = _fingerprint([*tree["found"].values()])
    result = fleet(str(tree["root"]), jobs=3)
    assert _fingerprint([*tree["found"].values()]) == before  # nothing written into any checkpoint
    rows = {r.path: r for r in result.rows}
    assert set(rows) == {*tree["found"], "broken"}
    compared = 0
    for rel, ckpt in tree["found"].items():
        row = rows[rel]
        assert row.error is None, rel
        code, want = _summary_latest(str(ckpt), capsys)
        # summary --latest's verdicts, and beside them the full summary's expired verdicts
        assert [v.to_json() for v in row.verdicts if v.check != "expired"] == want["verdicts"], rel
        leak = any(v.check == "expired" and v.severity == "warning" for v in row.verdicts)
        assert row.exit_code == max(code, int(leak)) and code == want["exit_code"], rel
        assert row.problems == want["problems"], rel
        compared += 1
    assert compared == 56
    # what the writing queries recorded
    checked = 0
    for rel, folder in tree["expected"].items():
        facts = json.loads((folder / "expected.json").read_text())
        row = rows[rel]
        committed = facts["committed_batches"]
        assert row.last_batch == max(committed), rel
        assert row.uncommitted == sorted(set(facts["batches"]) - set(committed)), rel
        meta = json.loads((folder / "checkpoint" / "metadata").read_text().splitlines()[0])
        assert row.query_id == meta["id"], rel
        assert row.last_batch_ms == facts["batch_timestamp_ms"][str(max(committed))], rel
        checked += 1
    assert checked == len(tree["expected"]) == 53
    for rel in ("spark43/agg_count", "spark34/agg_count", "spark35/agg_count", "spark43/codec_zstd"):
        facts = json.loads((tree["expected"][rel] / "expected.json").read_text())
        assert rows[rel].rows == len(facts["final_state"]), rel
        assert rows[rel].stores == 1
    for rel in ("spark43/pandas_state_event", "spark34/pandas_state_event", "spark35/pandas_state_event"):
        facts = json.loads((tree["expected"][rel] / "expected.json").read_text())
        zombies = _expected_zombies(facts, max(facts["committed_batches"]) + 1)
        assert zombies
        assert rows[rel].zombies == len(zombies), rel
        # a leak ranks as the full summary ranks it: its expired verdicts, word for word
        assert main(["summary", "--json", str(tree["found"][rel])]) == 1
        full = json.loads(capsys.readouterr().out)
        want_expired = [v for v in full["verdicts"] if v["check"] == "expired"]
        assert [v.to_json() for v in rows[rel].verdicts if v.check == "expired"] == want_expired, rel
        assert want_expired[0]["severity"] == "warning" and rows[rel].severity == "warning", rel
        assert rows[rel].exit_code == 1, rel
    assert rows["spark43/agg_count"].zombies is None  # nothing with a timeout to check
    # uncommitted: the batch Spark planned and never committed
    unc = rows["spark43/uncommitted"]
    assert unc.uncommitted == [2]
    assert unc.verdict("commit").severity == "warning"
    # the damaged copies: rows with the damage named, the run went on
    bad = rows["damaged/truncated_delta"]
    assert bad.severity == "error" and bad.restart == "error"
    assert bad.exit_code == 1
    assert any(p["path"] == tree["damaged_file"] for p in bad.problems)
    assert bad.unreadable == 1
    offsets = rows["damaged/bad_offsets"]
    assert any(p["path"] == "offsets/3" for p in offsets.problems)
    assert offsets.severity == "error"
    never = rows["fresh/never_ran"]
    assert never.last_batch is None and never.stores == 0
    assert never.verdict("restart").severity == "info"
    # a folder that cannot be listed is a row with its error; worst first puts it on top
    broken = rows["broken"]
    assert broken.error is not None and broken.exit_code == 2
    assert result.rows[0].path == "broken"
    assert result.exit_code == 2
    ranks = [("error", "warning", "info", "ok").index(r.severity) for r in result.rows]
    assert ranks == sorted(ranks)


def test_cli_json_jsonl_table_and_exit_code(tree, row_cache, capsys):
    root = tree["root"] / "damaged"
    code = main(["fleet", str(root), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1  # summary's exit code for the worst: a finding, no checkpoint unreadable
    assert sorted(r["path"] for r in doc["checkpoints"]) == ["bad_offsets", "truncated_delta"]
    assert doc["exit_code"] == 1 and doc["counts"]["error"] == 2
    for r in doc["checkpoints"]:
        assert FleetRow.from_json(r).to_json(doc["scanned_ms"]) == r
    code = main(["fleet", str(root), "--jsonl"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert sorted(json.loads(line)["path"] for line in lines) == ["bad_offsets", "truncated_delta"]
    code = main(["fleet", str(tree["root"] / "data")])
    captured = capsys.readouterr()
    assert code == 2
    assert "no checkpoint found" in captured.err
    code = main(["fleet", str(tree["root"] / "spark43"), "--no-zombies", "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 1
    table = out.split("\n\n")[0].splitlines()
    assert len(table) == 2 + len(SCENARIOS)
    assert table[2].split()[0] in ("WARNING", "ERROR")


def test_html_links_each_flagged_row_to_its_own_report(tree, row_cache, tmp_path, capsys):
    root = tmp_path / "two"
    root.mkdir()
    shutil.copytree(tree["found"]["damaged/truncated_delta"], root / "bad")
    (root / "good").symlink_to(get_checkpoint("agg_count") / "checkpoint")
    page = tmp_path / "fleet.html"
    code = main(["fleet", str(root), "--html", str(page)])
    capsys.readouterr()
    assert code == 1
    text = page.read_text()
    (report,) = (tmp_path / "fleet.html.reports").iterdir()  # the flagged checkpoint's only
    assert report.name == "bad.html"
    assert 'href="fleet.html.reports/bad.html"' in text
    assert tree["damaged_file"] in report.read_text()  # its own report names the damaged file
    assert f"statelens report {root / 'good'}" in text  # a fine one names the command instead
    assert text.index(">bad</a>") < text.index(str(root / "good"))  # worst first


# -- incremental ---------------------------------------------------------------------------------------
def test_second_run_reads_only_what_changed_and_since_tells_it(tree, row_cache, tmp_path, monkeypatch):
    root = tmp_path / "fleet"
    root.mkdir()
    agg = get_checkpoint("agg_count") / "checkpoint"
    shutil.copytree(agg, root / "orders")
    (root / "sessions").symlink_to(get_checkpoint("uncommitted") / "checkpoint")
    (root / "users").symlink_to(get_checkpoint("agg_count") / "checkpoint")
    (root / "retired").symlink_to(get_checkpoint("dedup_watermark") / "checkpoint")
    opened: list[str] = []
    real_open = fleet_module.open_checkpoint

    def counting_open(url: str, *args: Any, **kw: Any) -> Any:
        opened.append(Path(url).name)
        return real_open(url, *args, **kw)

    monkeypatch.setattr(fleet_module, "open_checkpoint", counting_open)
    first = fleet(str(root))
    assert sorted(opened) == ["orders", "retired", "sessions", "users"]
    assert first.cached == 0
    opened.clear()
    second = fleet(str(root))
    assert opened == []  # nothing changed: no checkpoint read beyond its listing
    assert second.cached == 4
    assert [r.to_json()["verdicts"] for r in second.rows] == [r.to_json()["verdicts"] for r in first.rows]
    # the last commit of one is lost, a leaking query replaces a clean one, one is gone, one is new
    (root / "orders" / "commits" / "3").unlink()
    (root / "users").unlink()
    (root / "users").symlink_to(get_checkpoint("pandas_state_event") / "checkpoint")
    (root / "retired").unlink()
    (root / "payments").symlink_to(get_checkpoint("rocks_agg") / "checkpoint")
    opened.clear()
    third = fleet(str(root))
    assert sorted(opened) == ["orders", "payments", "users"]
    compare(third, second.to_json())
    rows = {r.path: r for r in third.rows}
    assert rows["sessions"].cached
    assert third.gone == ["retired"]
    assert rows["payments"].changes == ["new checkpoint"]
    assert any(c.startswith("commit: ok -> warning") for c in rows["orders"].changes)
    facts = json.loads((get_checkpoint("pandas_state_event") / "expected.json").read_text())
    zombies = len(_expected_zombies(facts, max(facts["committed_batches"]) + 1))
    assert f"new leak: {zombies:,} zombie keys (none before)" in rows["users"].changes
    assert any(c.startswith("stalled") for c in rows["sessions"].changes)
    agg_facts = json.loads((get_checkpoint("agg_count") / "expected.json").read_text())
    assert rows["users"].rows_change == rows["users"].rows - len(agg_facts["final_state"])


def test_trend_per_store_since_the_previous_run_of_a_checkpoint(row_cache, tmp_path, capsys):
    root = tmp_path / "fleet"
    orders = root / "orders"
    shutil.copytree(get_checkpoint("agg_count") / "checkpoint", orders)
    held = tmp_path / "batch3"  # the last batch taken away: the checkpoint as it was after batch 2
    last = [orders / "offsets" / "3", orders / "commits" / "3", *orders.glob("state/0/*/4.delta")]
    assert len(last) == 4  # two partitions
    for f in last:
        (held / f.relative_to(orders)).parent.mkdir(parents=True, exist_ok=True)
        f.rename(held / f.relative_to(orders))
    agg = json.loads((get_checkpoint("agg_count") / "expected.json").read_text())
    # the uncommitted scenario runs the same first three input batches: its state including the batch it
    # did not commit is agg_count's after batch 2
    after2 = len(
        json.loads((get_checkpoint("uncommitted") / "expected.json").read_text())[
            "final_state_including_uncommitted"
        ]
    )
    (first,) = fleet(str(root)).rows
    assert first.trend is None  # no previous run
    assert first.store_rows == [
        {
            "operator_id": 0,
            "store_name": "default",
            "version": 3,
            "rows": after2,
            "state_bytes": first.state_bytes,
        }
    ]
    for f in held.rglob("*"):
        if f.is_file():
            f.rename(orders / f.relative_to(held))
    (second,) = fleet(str(root)).rows
    assert not second.cached
    (store,) = second.store_rows
    assert (store["version"], store["version_before"]) == (4, 3)
    assert store["rows"] == len(agg["final_state"]) and store["rows_before"] == after2
    assert store["rows_change"] == len(agg["final_state"]) - after2 > 0
    elapsed = second.checked_ms - first.checked_ms
    trend = second.trend
    assert trend is not None
    assert trend["since_batch"] == 2 and trend["batches"] == 1 and trend["since_ms"] == first.checked_ms
    assert trend["rows_change"] == store["rows_change"]
    assert trend["rows_per_day"] == pytest.approx(trend["rows_change"] * 86_400_000 / elapsed)
    assert trend["state_bytes_change"] == second.state_bytes - first.state_bytes
    # nothing new: the cached row keeps the trend it was computed with; the table and JSON show it
    third = fleet(str(root))
    assert third.cached == 1 and third.rows[0].trend == trend
    assert main(["fleet", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["checkpoints"][0]["trend"] == trend
    assert doc["checkpoints"][0]["store_rows"] == [store]
    assert main(["fleet", str(root)]) == 0
    assert f"{trend['rows_per_day']:+,.0f}/day" in capsys.readouterr().out
    # another query's checkpoint at the same place: no trend against the old one
    shutil.rmtree(orders)
    orders.symlink_to(get_checkpoint("uncommitted") / "checkpoint")
    (other,) = fleet(str(root)).rows
    assert other.trend is None and other.store_rows[0].get("rows_change") is None


def test_no_cache_reads_every_checkpoint_again(tree, row_cache, monkeypatch, tmp_path):
    root = tmp_path / "one"
    root.mkdir()
    (root / "a").symlink_to(get_checkpoint("agg_count") / "checkpoint")
    fleet(str(root))
    assert len(list(row_cache.glob("fleet/*/*.json"))) == 2  # the row by its files, and the latest row
    again = fleet(str(root), options=FleetOptions(cache=False, mirror=False))
    assert again.cached == 0
    assert fleet(str(root)).cached == 1


# -- the Python API ------------------------------------------------------------------------------------
def test_api_rows_as_arrow_and_pandas(tree, row_cache):
    f = statelens.fleet(str(tree["root"] / "spark35"), zombies=False, jobs=2)
    assert len(f) == len(VERSIONED_SCENARIOS)
    table = f.to_arrow()
    assert table.column_names == list(FLEET_COLUMNS)
    assert table.num_rows == len(f)
    assert table.column("path").to_pylist() == [r.path for r in f.rows]
    df = f.to_pandas()
    assert list(df["severity"]) == [r.severity for r in f.rows]
    assert f.to_json()["checkpoints"][0]["path"] == f.rows[0].path
    with pytest.raises(UsageError):
        statelens.fleet(str(tree["root"]), spark_version="four")


def test_memory_budget_holds_a_checkpoint_until_the_others_fit():
    budget = MemoryBudget(100)
    entered = threading.Event()

    def second() -> None:
        with budget.hold(60):
            entered.set()

    with budget.hold(60):
        t = threading.Thread(target=second)
        t.start()
        assert not entered.wait(0.3)  # 60 + 60 > 100: the second waits
        assert budget.used == 60
    t.join(10)
    assert entered.is_set()
    assert budget.peak == 60
    with budget.hold(10_000):  # heavier than the whole budget: runs alone, counted at the budget
        assert budget.used == 100
    assert budget.used == 0


def test_cli_since_prints_the_changes(tree, row_cache, tmp_path, capsys):
    root = tmp_path / "two"
    root.mkdir()
    (root / "orders").symlink_to(get_checkpoint("agg_count") / "checkpoint")
    assert main(["fleet", str(root), "--json"]) == 0
    previous = tmp_path / "monday.json"
    previous.write_text(capsys.readouterr().out)
    (root / "sessions").symlink_to(get_checkpoint("uncommitted") / "checkpoint")
    assert main(["fleet", str(root), "--since", str(previous)]) == 1
    out = capsys.readouterr().out
    assert "sessions: new checkpoint" in out
    assert "orders: stalled: no batch committed since the previous run (last batch 3)" in out
    with pytest.raises(SystemExit) as usage:
        main(["fleet", str(root), "--since", str(tmp_path / "missing.json")])
    assert usage.value.code == 2
    assert "cannot read a previous --json output" in capsys.readouterr().err
