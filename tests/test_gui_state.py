"""The tab controllers' state objects (``app/gui/controllers/*_state.py``, each beside its controller)
and the store catalog (``catalog.py``) decide without Qt: which store a picker lists first, where a
verdict's link leads, which key the history follows, what the browser reads, which store's keys to weigh,
what the SQL tab says of its answer. Tested on real checkpoints with no
``QApplication`` (and the modules import no Qt)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.growth import iter_growth
from statelens.app.analysis.sql import iter_sql_table, iter_table_columns
from statelens.app.analysis.summary import iter_summary
from statelens.app.analysis.timeline import iter_progress_series
from statelens.app.explore import iter_expired_overview, iter_key_history, read_schema_history
from statelens.app.gui.controllers.browser_state import PAGES_WAITED, BrowserState
from statelens.app.gui.controllers.catalog import StoreCatalog
from statelens.app.gui.controllers.expired_state import ExpiredState
from statelens.app.gui.controllers.growth_state import GrowthState
from statelens.app.gui.controllers.history_state import NO_KEY, NO_PARTITION, HistoryState
from statelens.app.gui.controllers.overview_state import OverviewState, VerdictLink
from statelens.app.gui.controllers.schema_state import SchemaState
from statelens.app.gui.controllers.sql_state import SqlState
from statelens.app.gui.controllers.timeline_state import TimelineState
from statelens.app.resources import sample_checkpoint_path
from statelens.app.session import LoadedCheckpoint, SelectionState
from statelens.app.state_table import iter_state_table
from statelens.readers.backends import native_backend
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.errors import StatelensError, UsageError
from statelens.readers.scan import StateScan
from tests.eventlog_gen import get_event_log

REPO = Path(__file__).resolve().parent.parent


def _loaded(path: Path | str) -> LoadedCheckpoint:
    return LoadedCheckpoint(str(path), open_checkpoint(str(path)))


def _catalog(loaded: LoadedCheckpoint) -> StoreCatalog:
    groups = {key: role.group for key, role in loaded.store_roles().items() if role.group is not None}
    return StoreCatalog.of(loaded, groups, loaded.decodable_stores())


def _state_bytes(root: Path, operator_id: int, store_name: str) -> int:
    """Bytes of an HDFS-backed store's delta and snapshot files on disk."""
    return sum(
        f.stat().st_size
        for part in (root / "state" / str(operator_id)).iterdir()
        if part.name.isdigit()
        for f in (part / store_name).iterdir()
        if f.is_file() and f.suffix in (".delta", ".snapshot")
    )


def _state_modules() -> list[str]:
    controllers = REPO / "app" / "gui" / "controllers"
    names = sorted(["catalog", *(p.stem for p in controllers.glob("*state.py"))])
    return [f"statelens.app.gui.controllers.{name}" for name in names]


def test_the_state_modules_import_no_qt() -> None:
    modules = _state_modules()
    assert len(modules) == 9  # the catalog, one per tab and the key history's
    code = (
        f"import sys, importlib; [importlib.import_module(m) for m in {modules!r}]; "
        "print(sorted(m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', 'statelens.viewers'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_the_qt_free_contract_names_every_state_module() -> None:
    """A state module added beside its controller is held Qt-free by ``lint-imports`` too."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["name"] == "the tab controllers' state objects stay Qt-free"
    ]
    assert sorted(contract["source_modules"]) == _state_modules()


# -- the overview ----------------------------------------------------------------------------------------
@pytest.mark.spark
def test_the_overview_names_a_damaged_file_once_and_links_each_verdict(
    checkpoint: Any, tmp_path: Path
) -> None:
    """A copy with a delta cut short: the verdicts' rows carry their store, batch and partition; the file
    is listed once as unreadable (the analyses and doctor both name it); each link leads to its proof."""
    root = tmp_path / "damaged"
    shutil.copytree(checkpoint("pandas_state_processing") / "checkpoint", root)
    delta = root / "state/0/1/6.delta"
    delta.write_bytes(delta.read_bytes()[:20])
    ckpt = open_checkpoint(str(root))
    summary = run_to_end(iter_summary(ckpt))
    state = OverviewState()
    state.summary = summary
    rows = state.verdict_rows(summary)
    assert [(sev, text, view) for sev, text, view, _ in rows] == [
        (v.severity, v.text, v.view) for v in summary.verdicts
    ]
    by_check = {target["check"]: (view, target) for _, _, view, target in rows}
    restart = next(v for v in summary.verdicts if v.check == "restart")
    assert restart.severity == "error" and "state/0/1/6.delta" in restart.text
    assert by_check["restart"] == (
        "overview",
        {"check": "restart", "operator_id": 0, "store_name": "default", "batch_id": 5, "partition_id": 1},
    )
    assert by_check["unreadable"] == ("overview", {"check": "unreadable"})
    # Links: the overview's own details, or the view proving the verdict, where it points.
    assert state.link(*by_check["restart"]) == VerdictLink("overview", "health")
    assert state.link(*by_check["unreadable"]) == VerdictLink("overview", "problems")
    expired = state.link(*by_check["expired"])
    assert expired.details is None and expired.view == "expired"
    assert expired.target == {
        "operator_id": 0,
        "store_name": "default",
        "batch_id": None,
        "partition_id": None,
    }
    commit = state.link(*by_check["commit"])
    assert commit.view == "timeline" and commit.target["batch_id"] == ckpt.last_committed_batch_id == 5
    # Health: doctor's findings, and the damaged file once (analyses and doctor both name it).
    findings, unreadable = state.health(summary)
    assert ("error", "undecodable_file") in [(sev, check) for sev, check, _, _ in findings]
    assert [getattr(e, "path", None) for e in unreadable] == ["state/0/1/6.delta"]
    # A file only doctor could decode-check is listed from its finding, naming the file.
    only_doctor = dataclasses.replace(summary, problems=[])
    _, unreadable = state.health(only_doctor)
    assert [(type(e), e.path) for e in unreadable] == [(StatelensError, "state/0/1/6.delta")]  # type: ignore[attr-defined]
    assert "cannot be decoded" in str(unreadable[0])
    state.reset()
    assert state.summary is None


def test_a_sound_checkpoint_has_no_unreadable_file() -> None:
    summary = run_to_end(iter_summary(open_checkpoint(str(sample_checkpoint_path()))))
    findings, unreadable = OverviewState.health(summary)
    assert unreadable == [] and all(check != "undecodable_file" for _, check, _, _ in findings)
    checks = {target["check"] for _, _, _, target in OverviewState.verdict_rows(summary)}
    assert {"restart", "commit", "expired"} <= checks


# -- the store catalog -------------------------------------------------------------------------------------
@pytest.mark.spark
def test_a_join_is_listed_by_rows_its_rows_sides_first(checkpoint: Any) -> None:
    root = checkpoint("join") / "checkpoint"
    loaded = _loaded(root)
    catalog = _catalog(loaded)
    sizes = {k: _state_bytes(root, *k) for k in catalog.keys}
    rows = sorted((k for k in catalog.keys if k[1].endswith("keyWithIndexToValue")), key=lambda k: -sizes[k])
    counts = sorted((k for k in catalog.keys if k[1].endswith("keyToNumValues")), key=lambda k: -sizes[k])
    assert catalog.by_rows() == rows + counts
    assert catalog.decodable_by_rows()[0] == loaded.default_store()  # the browser opens on its first store
    # A store with findings comes first; the others keep their order by rows.
    finding = counts[-1]
    assert catalog.by_findings({finding: 2}) == [finding, *rows, *counts[:-1]]
    assert catalog.by_findings({}) == catalog.by_rows()


@pytest.mark.spark
def test_a_join_key_count_store_bigger_than_its_rows_still_comes_after_them(checkpoint: Any) -> None:
    """A join's keyWithIndexToValue sides hold the rows: they come first even when a key-count store's
    files are bigger (as the browser's default store)."""
    loaded = _loaded(checkpoint("join") / "checkpoint")
    catalog = _catalog(loaded)
    sizes = dict(catalog.sizes)
    counts = [k for k in catalog.keys if k[1].endswith("keyToNumValues")]
    sizes[counts[0]] = max(sizes.values()) * 10
    bigger = StoreCatalog(catalog.keys, sizes, catalog.rows_sides, catalog.groups, catalog.decodable)
    assert [k[1].endswith("keyWithIndexToValue") for k in bigger.by_rows()] == [True, True, False, False]
    assert bigger.by_rows()[2] == counts[0]


@pytest.mark.spark
def test_transform_with_state_groups_stay_whole(checkpoint: Any) -> None:
    """State variables and Spark's internal families are two groups: findings in an internal family bring
    its whole group first, each group keeping its own order."""
    loaded = _loaded(checkpoint("rocks_tws_timers") / "checkpoint")
    catalog = _catalog(loaded)
    variables = [k for k in catalog.keys if not k[1].startswith("$")]
    internal = [k for k in catalog.keys if k[1].startswith("$")]
    assert [k[1] for k in variables] == ["cnt", "ttll", "ttlm", "ttlv"] and internal
    assert catalog.by_rows() == variables + internal  # RocksDB families share their files: equal sizes
    assert not catalog.rows_sides
    ttl = (0, "$ttl_ttlv")
    found = {(0, "ttlm"): 2, ttl: 5}
    assert catalog.by_findings(found) == [ttl, *(k for k in internal if k != ttl), (0, "ttlm")] + [
        k for k in variables if k != (0, "ttlm")
    ]


@pytest.mark.spark
def test_a_checkpoint_opens_on_its_default_store_or_on_what_a_reload_kept(checkpoint: Any) -> None:
    root = checkpoint("join") / "checkpoint"
    loaded = _loaded(root)
    catalog = _catalog(loaded)
    default = loaded.default_store()
    assert default is not None
    latest = loaded.checkpoint.operator(default[0]).store(default[1]).versions[-1]
    fresh = {"operator_id": default[0], "store_name": default[1], "partition_id": None, "version": latest}
    other = catalog.by_rows()[-1]
    previous = {**SelectionState().snapshot(), "operator_id": other[0], "store_name": other[1], "version": 2}
    assert catalog.opening(previous, reloading=False, default=default) == fresh
    assert catalog.opening(previous, reloading=True, default=default) == previous  # F5 keeps the selection
    gone = {**previous, "store_name": "not-a-store"}
    assert catalog.opening(gone, reloading=True, default=default) == fresh
    assert catalog.opening(gone, reloading=False, default=None) is None
    # Switching store: the selected batch's version, else the new store's latest.
    assert catalog.version_on_switch(other, 2, batch_selected=True) == 2
    assert catalog.version_on_switch(other, 2, batch_selected=False) == catalog.versions[other][-1] == latest
    assert catalog.latest_version((9, "none")) is None


# -- the batch timeline ----------------------------------------------------------------------------------
@pytest.mark.spark
def test_the_timeline_reads_a_rolling_logs_folder_once_and_says_what_it_found() -> None:
    folder = get_event_log("restart")
    first, second = sorted((folder / "events").iterdir())
    rolling_file = next(first.glob("events_1_*"))
    state = TimelineState()
    logs: list[str] = []
    assert state.add_event_logs(logs, [str(rolling_file), str(second)]) == [str(first), str(second)]
    assert state.add_event_logs(logs, [str(first), str(next(second.glob("events_*")))]) == []  # each once
    assert logs == [str(first), str(second)]
    other = str(folder / "progress.json")
    assert state.event_log_path(other) == other  # a progress dump is read as it is
    series = run_to_end(iter_progress_series(open_checkpoint(str(folder / "checkpoint")), logs))
    assert state.progress_summary == ""
    readout = state.shown(series)
    runs = json.loads((folder / "progress.json").read_text())
    batches = {p["batchId"] for run in runs for p in run}
    assert state.progress_summary == series.summary
    assert f"progress for {len(batches)} batches of this query in {len(runs)} run(s)" in series.summary
    assert readout == series.summary + ". Move the mouse over the plots to read a batch."


# -- the key history ------------------------------------------------------------------------------------
def test_the_history_follows_the_selected_key_in_its_partition() -> None:
    root = sample_checkpoint_path()
    loaded = _loaded(root)
    finding = run_to_end(iter_expired_overview(loaded.checkpoint)).result.examples[0]
    selection = SelectionState()
    assert HistoryState.to_follow(selection, loaded) == NO_KEY
    selection.update(operator_id=0, store_name="default", key=finding.key, partition_id=None)
    assert HistoryState.to_follow(selection, None) == NO_KEY  # no checkpoint shown
    assert HistoryState.to_follow(selection, loaded) == NO_PARTITION  # every partition selected
    selection.update(partition_id=1 - finding.partition)
    assert HistoryState.to_follow(selection, loaded).partition_id == 1 - finding.partition  # type: ignore[union-attr]
    selection.update(key_partition_id=finding.partition)  # the key's own partition wins
    request = HistoryState.to_follow(selection, loaded)
    assert not isinstance(request, str)
    assert (request.operator_id, request.store_name, request.partition_id, request.key) == (
        0,
        "default",
        finding.partition,
        finding.key,
    )
    # The batches' times, as the offsets files say them (their second line).
    offsets = {
        int(f.name): json.loads(f.read_text().splitlines()[1])
        for f in (root / "offsets").iterdir()
        if f.name.isdigit()
    }
    assert dict(request.batch_times) == {
        b: (o["batchTimestampMs"], o["batchWatermarkMs"]) for b, o in offsets.items()
    }
    assert request.first_start_s == min(o["batchTimestampMs"] for o in offsets.values()) / 1000
    assert request.loading_text.endswith(f"through the versions of partition {finding.partition}…")
    reader = StateScan(native_backend(loaded.checkpoint), 0, "default")
    history = run_to_end(
        iter_key_history(
            reader, request.partition_id, request.key, request.time_columns, dict(request.batch_times)
        )
    )
    assert history.key == finding.key and finding.version in history.versions
    state = HistoryState(request=request, history=history)
    state.reset()
    assert state.request is None and state.history is None


def test_the_history_follows_a_new_key_once() -> None:
    """A key picked while the history shows is followed on the selection change; the request that comes
    with it is not followed a second time. Refresh (None) always is."""
    assert HistoryState.follows_change({"key"}, shown=True, key={"k": 1})
    assert not HistoryState.follows_change({"key"}, shown=False, key={"k": 1})
    assert not HistoryState.follows_change({"key"}, shown=True, key=None)
    assert not HistoryState.follows_change({"version"}, shown=True, key={"k": 1})
    assert not HistoryState.follows_request({"key", "version"}, shown=True)
    assert HistoryState.follows_request({"key"}, shown=False)
    assert HistoryState.follows_request({"version"}, shown=True)
    assert HistoryState.follows_request(None, shown=True)


# -- SQL ------------------------------------------------------------------------------------------------
def test_the_sql_tab_says_how_much_of_its_answer_it_shows() -> None:
    root = sample_checkpoint_path()
    ckpt = open_checkpoint(str(root))
    batches = sorted(int(f.name) for f in (root / "offsets").iterdir() if f.name.isdigit())
    state = SqlState()
    assert not state.runs("  \n", opened=True) and not state.runs("SELECT 1", opened=False)
    assert state.runs("SELECT 1", opened=True)
    query = "SELECT batch_id FROM batches ORDER BY batch_id"
    operator_id, store_name = state.store_of(None)  # no store picked: the query names its tables
    answer = run_to_end(
        iter_sql_table(ckpt, query, operator_id=operator_id, store_name=store_name, max_rows=2)
    )
    status = state.answered(answer)
    assert state.answer is answer and state.error is None
    assert answer.columns == [[str(b) for b in batches[:2]]]
    assert status.startswith(f"{len(batches)} rows in ")
    assert status.endswith(" s (the first 2 shown; statelens sql --csv/--parquet writes them all)")
    whole = run_to_end(iter_sql_table(ckpt, query))
    assert "shown" not in state.answered(whole) and state.answer is whole
    with pytest.raises(UsageError) as err:
        run_to_end(iter_sql_table(ckpt, "SELECT nope FROM batches"))
    assert state.failed(str(err.value)) == str(err.value)
    assert state.answer is None and state.error is not None and "nope" in state.error


def test_the_sql_tab_lists_the_picked_stores_tables() -> None:
    ckpt = open_checkpoint(str(sample_checkpoint_path()))
    state = SqlState()
    assert state.store_of((0, "default")) == (0, "default") and state.store_of(None) == (None, None)
    state.listed(*run_to_end(iter_table_columns(ckpt, *state.store_of((0, "default")))))
    assert {"batches", "state", "changes"} <= set(state.tables) and state.tables_note == ""
    state_columns = [name for name, _type in state.tables["state"]]
    assert state_columns[:4] == ["operator_id", "store_name", "version", "partition_id"]
    assert state_columns[4:] == ["key", "value"]
    assert state.running_text(True, "local[2]") == "Running the query in Spark on local[2]…"
    assert "tables are filled from the checkpoint first" in state.running_text(False, "local[2]")


# -- schema and conf ------------------------------------------------------------------------------------
@pytest.mark.spark
def test_the_schema_view_lists_each_stores_schema_file(checkpoint: Any) -> None:
    root = checkpoint("join") / "checkpoint"
    on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("_metadata/schema"))
    versions, problems = read_schema_history(open_checkpoint(str(root)))
    state = SchemaState()
    rows = state.read(versions)
    assert not problems and state.files == rows
    assert sorted(path for _, _, path, _ in rows) == on_disk and len(on_disk) == 4
    for store, from_batch, path, changes in rows:  # v2 files: no batch in their name, nothing changed
        assert store == f"operator 0 · {path.split('/')[3]}" and from_batch is None and changes == []
    selection = SelectionState()
    selection.update(operator_id=0, store_name="left-keyWithIndexToValue")
    assert state.store_shown(selection) == (0, "left-keyWithIndexToValue")
    state.reset()
    assert state.files == []


@pytest.mark.spark
def test_a_v3_schema_file_says_the_batch_that_wrote_it(checkpoint: Any) -> None:
    root = checkpoint("rocks_tws_timers") / "checkpoint"
    (written,) = [p for p in (root / "state/0/_stateSchema/default").iterdir() if not p.name.startswith(".")]
    rows = SchemaState().read(read_schema_history(open_checkpoint(str(root)))[0])
    # One file holds every state variable's and internal family's schema.
    assert {path for _, _, path, _ in rows} == {str(written.relative_to(root))}
    assert {from_batch for _, from_batch, _, _ in rows} == {int(written.name.split("_")[0])}
    assert "operator 0 · cnt" in [store for store, _, _, _ in rows]


# -- the state browser -----------------------------------------------------------------------------------
def test_the_browser_reads_the_selection_or_its_diff() -> None:
    state = BrowserState()
    selection = SelectionState()
    assert state.read(selection) is None  # no store selected
    selection.update(operator_id=0, store_name="default", version=5, partition_id=None)
    read = state.read(selection)
    assert read is not None and not read.is_diff and read.where == "all partitions"
    with pytest.raises(ValueError, match="not a diff"):
        _ = read.diff_versions
    state.compare_version = 5  # the same version: no diff
    assert not state.read(selection).is_diff  # type: ignore[union-attr]
    state.compare_version = 7
    selection.update(partition_id=1)
    read = state.read(selection)
    assert read is not None and read.is_diff and read.diff_versions == (5, 7) and read.where == "partition 1"
    state.reset()
    assert state.compare_version is None and not state.read(selection).is_diff  # type: ignore[union-attr]


def test_the_browser_waits_for_the_last_pages_asked_for() -> None:
    state = BrowserState()
    assert state.next_page() is None
    dropped = [state.want_page(offset) for offset in range(0, 100 * (PAGES_WAITED + 2), 100)]
    assert dropped[:PAGES_WAITED] == [[]] * PAGES_WAITED and dropped[PAGES_WAITED:] == [[0], [100]]
    assert state.want_page(300) == []  # asked again: read first
    assert state.next_page() == 300
    assert [state.next_page() for _ in range(PAGES_WAITED - 1)] == [700, 600, 500, 400, 200]
    assert state.next_page() is None


def test_the_browser_describes_the_rows_it_shows() -> None:
    ckpt = open_checkpoint(str(sample_checkpoint_path()))
    reader = StateScan(native_backend(ckpt), 0, "default")
    version = ckpt.operator(0).store("default").versions[-1]
    table = run_to_end(iter_state_table(reader, version, 0))
    text = BrowserState().describe(table, "grouping state")
    assert text.startswith(
        f"{table.total_rows:,} rows · operator 0 default (grouping state) · partition 0 · "
    )
    assert f"version {version} (state after batch {version - 1})" in text
    assert text.endswith("read by the native decoder")


# -- expired keys ----------------------------------------------------------------------------------------
def test_the_expired_view_opens_on_the_most_findings_unless_a_store_was_picked() -> None:
    loaded = _loaded(sample_checkpoint_path())
    catalog = _catalog(loaded)
    state = ExpiredState()
    assert state.store_order(catalog) == catalog.by_rows() and state.findings() == []
    state.overview = run_to_end(iter_expired_overview(loaded.checkpoint))
    order = state.store_order(catalog)
    assert order == [(0, "default")] and state.overview.findings_per_store()[(0, "default")] > 0
    assert state.store_to_show(order, (None, None), chosen=False) == (0, "default")
    assert state.store_to_show(order, (0, "default"), chosen=True) == (0, "default")
    assert state.store_to_show(order, (3, "gone"), chosen=True) == (0, "default")  # not listed
    assert state.store_to_show([], (None, None), chosen=False) is None
    listed = state.store_findings((0, "default"))
    assert listed and listed == state.findings() and state.store_findings((3, "gone")) == []
    f = listed[0]
    change = state.finding_selection((0, "default"), f.partition, f.version, f.key, browsable=True)
    assert change == {
        "key": f.key,
        "key_partition_id": f.partition,
        "operator_id": 0,
        "store_name": "default",
        "partition_id": f.partition,
        "version": f.version,
        "batch_id": f.version - 1,
    }
    assert state.finding_selection((0, "x"), 1, 0, f.key, browsable=False) == {
        "key": f.key,
        "key_partition_id": 1,
    }
    state.reset()
    assert state.overview is None


# -- state growth ----------------------------------------------------------------------------------------
def test_growth_weighs_the_selected_store_once_after_growth() -> None:
    state = GrowthState(top_keys=5)
    decodable = {(0, "default")}
    assert state.to_weigh((0, "default"), decodable) is None  # growth not measured yet
    state.done = True
    assert state.to_weigh((None, None), decodable) is None
    assert state.to_weigh((0, "other"), decodable) is None  # not decoded natively
    assert state.to_weigh((0, "default"), decodable) == (0, "default")
    assert state.to_weigh((0, "default"), decodable) is None  # once per store
    state.forget((0, "default"))  # weighing failed: asked again
    assert state.to_weigh((0, "default"), decodable) == (0, "default")
    state.reset()
    assert not state.done and not state.weighed and state.top_keys == 5


@pytest.mark.spark
def test_growth_notes_say_what_a_stores_numbers_count(checkpoint: Any) -> None:
    loaded = _loaded(checkpoint("rocks_tws_timers") / "checkpoint")
    roles = loaded.store_roles()
    result = run_to_end(iter_growth(loaded.checkpoint))
    by_name = {s.store_name: s for s in result.stores}
    ttll = GrowthState.store_notes(by_name["ttll"], result.problems, roles[(0, "ttll")])
    assert "List state: one row per list element." in ttll
    assert "column family of RocksDB store" in ttll
    assert "could not be read" not in ttll
    assert "List state" not in GrowthState.store_notes(by_name["cnt"], result.problems, roles[(0, "cnt")])
    assert GrowthState.store_notes(by_name["cnt"], result.problems, None) == ""
