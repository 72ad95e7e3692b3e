"""Mutation testing of the decoders: ``python -m tests.mutation [MODULE ...]``; ``--ci`` in CI.

mutmut (https://mutmut.readthedocs.io) changes one operator, constant or call at a time in a decoder
module and runs the module's fast tests against each change (a *mutant*); a mutant no test notices
*survived*, and shows a behaviour no test pins down. This is not ``tests/_mutations.py``, which damages
the bytes of real files for the fuzz-style tests of logs and schemas.

Per module, the command prints the kill rate and every surviving mutant as a diff. ``MODULE`` is one of
:data:`MODULES` (default: all); options::

    --ci                the CI run (the last step of scripts/test.sh): from scratch, per decoder file
                        the CI_SAMPLE mutants stable_sample picks; prints each file's score
                        (killed / (sampled - listed equivalent)) and its survivors, compares them with
                        tests/mutation_scores.json, and exits 1 when a file scores under FLOOR (85%)
                        or a scenario is missing from the checkpoint cache. With --report: the last
                        run's results again (after --retry); with --write: update the scores file
    --sample N          test a sample of N mutants per module (stable_sample, seeded by --seed, default 0)
                        instead of all of them; the rate then comes with its 95% interval. Mutants
                        of the sample tested before keep their result: an interrupted run goes on
    --fresh             forget earlier results of these modules and test every mutant again
    --retry             test again only the mutants that were not killed (after adding tests: killed
                        mutants stay killed, since tests are only ever added)
    --report            print the results of the last run without running anything
    --no-diffs          name the surviving mutants without their diffs
    --max-children N    mutants tested at once (default 1: the machine is shared)

How it runs: each module gets a work folder ``.mutation/<module>/`` (ignored by git) holding a
``statelens/`` root whose ``readers`` links to the repository's ``readers/`` (the layout of the
repository's own ``statelens/`` folder) and a ``pyproject.toml`` with a ``[tool.mutmut]`` section
naming the files to mutate. mutmut copies the package and the tests into ``.mutation/<module>/mutants/``,
runs the selected tests once to learn which tests reach which function, then runs, per mutant, only
those tests (``-x``, a CPU-time limit of 15x their clean time). The selected tests are the module's
test files minus every test that asks for the ``spark`` fixture (a JVM) and every test parametrised
with a scenario missing from the shared checkpoint cache (``.cache/checkpoints``; the command names
those scenarios: generate them with ``python -m tests.spark_checkpoints NAME``); any other test that
asks for a missing checkpoint fails rather than start Spark (``tests/mutation_plugin.py``). Hypothesis
runs with a fixed seed, so two runs test the same examples.

Mutants listed in :data:`EQUIVALENT` cannot change what the module does (each has its reason) and are
left out of the rate; the report names them, and any listed name that no longer exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / ".mutation"


@dataclass(frozen=True)
class Target:
    """One module to mutate and the fast tests that exercise it."""

    files: tuple[str, ...]  # under readers/
    tests: tuple[str, ...]  # pytest arguments (files or node ids)


#: The fuzz seeds (each decoded to what it holds) and the regressions of tests/test_fuzz.py: whole
#: files of every kind, many of them RocksDB zips, changelogs, column family rows and Avro rows.
_FUZZ_CASES = tuple(
    f"tests/test_fuzz.py::{name}"
    for name in (
        "test_seed_decodes_to_what_it_holds",
        "test_former_crash_gives_a_value_or_a_statelens_error",
        "test_avro_array_of_nulls_count_2_pow_40",
        "test_key_encoder_spec_numbers_not_integers",
        "test_split_list_value_of_40000_elements",
        "test_zip_metadata_crashes_found_by_review",
        "test_zip_entries_spark_never_writes_are_refused",
        "test_changelog_v3_lineage_nested_too_deeply",
    )
)

#: The decoder modules, grouped by the fast tests that exercise them (one mutmut work folder a group).
#: A decoder is a module that turns bytes or text Spark wrote into statelens' values and refuses what
#: Spark could not have written: the state files' codecs, record streams, rows and stores, and the
#: text logs, schemas and operator metadata (docs/format.md). Every other module of ``readers/`` is in
#: :data:`NOT_DECODERS` with the reason (``tests/test_mutation_ci.py`` checks that none is left out).
MODULES: dict[str, Target] = {
    "records": Target(("_format/records.py",), ("tests/test_records.py",)),
    "codecs": Target(("_format/codecs.py",), ("tests/test_codecs.py",)),
    "unsaferow": Target(("_format/unsaferow.py",), ("tests/test_unsaferow.py",)),
    "unsaferow_arrow": Target(("_format/unsaferow_arrow.py",), ("tests/test_unsaferow_arrow.py",)),
    "replay": Target(
        ("_format/hdfs_store.py", "_format/store_base.py"), ("tests/test_replay.py", "tests/test_cache.py")
    ),
    "rocksdb": Target(
        ("_format/rocksdb_store.py",),
        ("tests/test_rocksdb_store.py", "tests/test_column_families.py", *_FUZZ_CASES),
    ),
    "column_families": Target(
        ("_format/cf_codec.py", "_format/cf_store.py", "_format/avro_rows.py"),
        ("tests/test_column_families.py", "tests/test_column_family_codecs.py", *_FUZZ_CASES),
    ),
    "rowchecksum": Target(("_format/rowchecksum.py",), ("tests/test_row_checksums.py",)),
    "logs": Target(("logs.py",), ("tests/test_logs.py",)),
    "checksums": Target(("checksums.py",), ("tests/test_checksums.py",)),
    "schemas": Target(("schemas.py",), ("tests/test_schemas.py",)),
    "opmeta": Target(("opmeta.py",), ("tests/test_opmeta.py",)),
    "operators": Target(("operators.py",), ("tests/test_operators.py",)),
}

#: The modules of ``readers/`` that are not mutated, and why.
NOT_DECODERS: dict[str, str] = {
    "__init__.py": "a package marker",
    "_format/__init__.py": "a package marker",
    "_format/kernels.py": (
        "numba-compiled record walks: mutmut's trampolines cannot run inside compiled code; the walks only "
        "find where records start, and records.py re-walks in checked Python on any oddity (its tests "
        "compare the two walks)"
    ),
    "_format/keyids.py": "numbers keys already cut from the records: arithmetic on decoded bytes, no format",
    "arrow_values.py": "turns decoded Arrow columns into Python values for display: after decoding",
    "backends/__init__.py": "picks a backend: no format",
    "backends/base.py": "the backend protocol and shared plumbing: no format",
    "backends/native.py": "wires the decoders into the backend protocol: no format of its own",
    "backends/spark.py": "asks Spark's own state sources through a JVM: Spark decodes",
    "backends/spark_engine.py": "Spark's frames of a store and an analysis's SQL over them: Spark decodes",
    "cache.py": "statelens' own Parquet cache of decoded state: a format statelens writes",
    "checkpoint.py": "lists a checkpoint's folders and hands their files to the decoders",
    "errors.py": "the error classes",
    "eventlog.py": (
        "reads Spark's listener events (JSON lines of event and driver logs), not a checkpoint's files; "
        "its tests need event logs written by a Spark run"
    ),
    "fs.py": "read-only file access: no format",
    "lru.py": "a size-capped folder of files: no format",
    "mirror.py": "a local copy of remote files: no format",
    "model.py": "the shared dataclasses",
    "parallel.py": "runs per-partition work on threads",
    "restart.py": (
        "decides which listed files a restart loads (Spark's loader): no bytes; held to what Spark did by "
        "tests/test_restart_matrix.py"
    ),
    "rewrite.py": "writes a state version (statelens prune): an encoder, checked by decoding what it writes",
    "scan.py": "what to read and in which output form: no format",
    "scan_diff.py": "compares two versions' stored records as bytes; the store readers decode them",
    "discover.py": "finds checkpoint folders in listings (names only, no file format)",
    "replay_state.py": (
        "holds a replay's records as bytes in arrays, no format of its own (tests/test_replay.py compares "
        "it with a dict version by version, rebuilt at every change)"
    ),
    "scan_files.py": "lists a store's files and hands each to the decoders for its check: no format",
    "scan_fields.py": (
        "reads one fixed-width integer field of a stored UnsafeRow through the layout unsaferow.py compiles "
        "(docs/format.md §6.1); held to the decoded rows by tests/test_analysis_expired.py"
    ),
    "scan_sizes.py": "counts the records the store readers replay: no format",
    "textfmt.py": "formats numbers and times for people",
    "values.py": "JSON, CSV and Parquet forms of decoded values: after decoding",
}

#: Mutants that cannot change behaviour: name -> why. Names are mutmut's
#: (``statelens.readers.<module>.x<function>__mutmut_<n>``); they hold for the code they were listed
#: against and the report flags any that no longer exists.
_SAME_LENGTH = "zip(..., strict=True) over lists built from one record index: their lengths are always equal"
_UNREACHABLE = "the text of an assertion that cannot fail: the checked scan before it raises the file's error"
_FROMITER_COUNT = "numpy.fromiter's count only sizes the array in advance; the iterator gives the same items"
_RESHAPE = "numpy's reshape takes any negative size as 'the rest': reshape(-2) is reshape(-1)"
_DEFAULT_INT64 = "numpy's default integer is int64 on the 64-bit platforms statelens runs on"
_STRIDED_BOUND = (
    "slices' strided path checks that the last slice fits the buffer, which a record index over its own "
    "bytes always does: a looser check never meets a slice that does not fit, and a stricter one only sends "
    "the slices down the gather path, which cuts the same bytes"
)
EQUIVALENT: dict[str, str] = {
    "statelens.readers._format.unsaferow.x__values__mutmut_231": _SAME_LENGTH,
    "statelens.readers._format.unsaferow.x__values__mutmut_244": _SAME_LENGTH,
    "statelens.readers._format.unsaferow.x__map_at__mutmut_75": "the lengths were compared just before: they are equal",
    "statelens.readers._format.unsaferow.x__values__mutmut_128": (
        "without nulls every row is present, and flatnonzero(present) is arange(n)"
    ),
    "statelens.readers._format.unsaferow.x__row_at__mutmut_19": 'struct.unpack_from("<0Q", ...) is (), as the else gives',
    "statelens.readers._format.unsaferow.x_decode_rows__mutmut_32": _DEFAULT_INT64,
    "statelens.readers._format.unsaferow.x_compile_layout__mutmut_5": (
        "compiles the layout again, then the cache's setdefault returns the layout compiled first: same object"
    ),
    "statelens.readers._format.unsaferow.x__row_at__mutmut_13": (
        "a layout of no fields needs 0 bytes, and a negative length is refused before: the message is never built"
    ),
    "statelens.readers._format.unsaferow_arrow.x__scatter__mutmut_7": _DEFAULT_INT64,
    "statelens.readers._format.unsaferow_arrow.x__bytes_column__mutmut_73": (
        "null_count=-1 lets Arrow count the nulls from the validity bitmap: the same count"
    ),
    "statelens.readers._format.unsaferow_arrow.x__column__mutmut_15": (
        "pa.array infers bool from a numpy bool array, the type it is given"
    ),
    "statelens.readers._format.unsaferow_arrow.x_iter_decode_arrow__mutmut_10": _RESHAPE,
    "statelens.readers._format.unsaferow_arrow.x_iter_decode_arrow__mutmut_36": _RESHAPE,
    "statelens.readers._format.unsaferow_arrow.x__struct__mutmut_56": (
        "zip of the layout's fields, their null masks and the Arrow type's fields, whose counts were "
        "checked equal before"
    ),
    "statelens.readers._format.unsaferow_arrow.x__bytes_column__mutmut_68": (
        "without null_count, Arrow counts the nulls from the validity bitmap: the same count as mask.sum()"
    ),
    "statelens.readers._format.unsaferow_arrow.x__column__mutmut_50": (
        "a long-backed decimal's target is always the decimal type to_arrow_type gives it, and no other kind "
        "of this branch has a decimal target: the condition holds for the same fields"
    ),
    "statelens.readers._format.unsaferow_arrow.x__column__mutmut_18": (
        "pa.array infers bool from a numpy bool array, the type it is given"
    ),
    "statelens.readers._format.unsaferow_arrow.x__column__mutmut_24": (
        "sends every long-backed decimal (scale 0 for any other kind) down the exact Python path, "
        "which gives the same values as the vectorised one"
    ),
    "statelens.readers._format.unsaferow_arrow.x__column__mutmut_8": (
        "a void (NullType) column's Arrow type is null, which pa.nulls gives without a type"
    ),
    "statelens.readers._format.records.x__scan_sized__mutmut_82": _UNREACHABLE,
    "statelens.readers._format.records.x__scan_sized__mutmut_83": _UNREACHABLE,
    "statelens.readers._format.records.x__scan_typed__mutmut_20": _UNREACHABLE,
    "statelens.readers._format.records.x_slices__mutmut_18": _SAME_LENGTH,
    "statelens.readers._format.records.x_slices__mutmut_19": _SAME_LENGTH,
    "statelens.readers._format.records.x_value_slices__mutmut_22": _SAME_LENGTH,
    "statelens.readers._format.records.x_slices__mutmut_36": _STRIDED_BOUND,
    "statelens.readers._format.records.x_slices__mutmut_37": _STRIDED_BOUND,
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁapply_records__mutmut_8": _SAME_LENGTH,
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁ_raw_arrays__mutmut_13": _FROMITER_COUNT,
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁ_raw_change_arrays__mutmut_20": _FROMITER_COUNT,
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁ_raw_change_arrays__mutmut_71": (
        "a remove's value length of -2 instead of -1: the arrays' one reader, read_changes_arrow, tests < 0"
    ),
    "statelens.readers._format.hdfs_store.xǁHDFSStoreReaderǁ_version_arrays_workers__mutmut_3": (
        "the number of threads partitions are replayed on; results come back in partition order either way"
    ),
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁapply_records__mutmut_15": _SAME_LENGTH,
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁread_changes_arrow__mutmut_81": _DEFAULT_INT64,
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁread_changes_arrow__mutmut_91": _DEFAULT_INT64,
    "statelens.readers._format.hdfs_store.xǁHDFSStoreReaderǁ_raw_arrays__mutmut_20": (
        "the version tags of _read_records are never read by positions(), the only thing taken from it"
    ),
    "statelens.readers._format.hdfs_store.xǁHDFSStoreReaderǁ_records__mutmut_8": _SAME_LENGTH,
    "statelens.readers._format.hdfs_store.xǁHDFSStoreReaderǁ_records__mutmut_9": _SAME_LENGTH,
    "statelens.readers._format.hdfs_store.xǁHDFSStoreReaderǁ_raw_arrays__mutmut_10": (
        "the name of a read-ahead plan: on the local disk nothing is read ahead, and on remote storage "
        "another name starts the same fetches of the same files"
    ),
    "statelens.readers._format.hdfs_store.x_list_partition_files__mutmut_2": (
        "PartitionFiles.partition_id is read nowhere (each StateFile carries its own)"
    ),
    "statelens.readers._format.rocksdb_store.xǁRocksDBStoreReaderǁ_checked_changelog_pairs__mutmut_15": _SAME_LENGTH,
    "statelens.readers._format.rocksdb_store.xǁ_FamilyReplayǁlive__mutmut_28": (
        "zip(*elements) over (record, start, len) triples: every tuple has three items"
    ),
    "statelens.readers._format.rocksdb_store.xǁRocksDBStoreReaderǁread_raw__mutmut_52": (
        "the name of a read-ahead plan: on the local disk nothing is read ahead, and on remote storage "
        "another name starts the same fetches of the same files"
    ),
    "statelens.readers._format.rocksdb_store.xǁ_Workspaceǁ__init____mutmut_6": (
        "the prefix of the name of statelens' own temporary folder, removed when the reader closes"
    ),
    "statelens.readers._format.cf_store.xǁColumnFamilyStoreReaderǁdecode_pairs__mutmut_39": _SAME_LENGTH,
    "statelens.readers._format.cf_store.xǁColumnFamilyStoreReaderǁ_key_column__mutmut_209": _RESHAPE,
    "statelens.readers._format.cf_store.xǁColumnFamilyStoreReaderǁ_key_column__mutmut_82": (
        "a prefix-scan key of exactly 4 bytes is refused either way: its prefix size is under 1 or leaves "
        "a rest of 4 - 4 - size < 1 bytes, and both return None"
    ),
    "statelens.readers._format.cf_codec.x_decode_keys__mutmut_257": (
        "zip(..., strict=True) of the non-ordering ordinals and a row decoded with a schema of exactly "
        "those columns: their lengths are always equal"
    ),
    "statelens.readers._format.rowchecksum.x_strip_hdfs__mutmut_7": _SAME_LENGTH,
    "statelens.readers._format.rowchecksum.x_strip_hdfs__mutmut_11": _SAME_LENGTH,
    "statelens.readers._format.store_base.x_counts_by_key__mutmut_41": (
        "np.bincount turns its weights into float64 whatever their dtype: 0 and 1 either way"
    ),
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁ_read_ahead__mutmut_7": (
        "the read-ahead kept under another key: setdefault returns the first one stored there on every "
        "call (the one built and dropped each time has no effect: it starts nothing); on the local disk "
        "the method returns before"
    ),
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁbig__mutmut_7": (
        "the store's size memoised under a name never read back: summed again on each call, the same sum"
    ),
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁ_state_table__mutmut_2": (
        "only the partition field is taken from the empty table, and it is the same for every naming"
    ),
    "statelens.readers._format.store_base.xǁStoreReaderBaseǁ_state_table__mutmut_3": (
        "only the partition field is taken from the empty table; changes=None builds the same one as False"
    ),
}

# What mutmut's exit codes mean (mutmut.stats.status_by_exit_code, mutmut 3.x).
_KILLED = {
    1: "killed",
    3: "killed",
    36: "timeout",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
}
_CRASHED = {-11: "segfault", -9: "segfault"}


def _mutmut_config(target: Target) -> str:
    only = ", ".join(json.dumps(f"statelens/readers/{f}") for f in target.files)
    tests = ", ".join(json.dumps(t) for t in target.tests)
    return f"""
[tool.mutmut]
source_paths = ["statelens/readers"]
only_mutate = [{only}]
also_copy = ["statelens/__init__.py", "statelens/app", "statelens/viewers", "statelens/resources"]
pytest_add_cli_args_test_selection = [{tests}]
pytest_add_cli_args = ["-p", "tests.mutation_plugin", "-p", "no:cacheprovider", "--hypothesis-seed=0"]
max_stack_depth = -1
use_git_change_detection = false
"""


def prepare(name: str, fresh: bool) -> Path:
    """Lay out ``.mutation/<name>/`` for mutmut (a fresh one drops earlier results)."""
    work = WORK / name
    if fresh and work.exists():
        shutil.rmtree(work)
    (work / "statelens").mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "statelens" / "__init__.py", work / "statelens" / "__init__.py")
    for sub in ("readers", "app", "viewers", "resources"):
        link = work / "statelens" / sub
        if not link.is_symlink():
            link.symlink_to(REPO / sub, target_is_directory=True)
    if not (work / "tests").is_symlink():
        (work / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    text = (REPO / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(text + _mutmut_config(MODULES[name]))
    # mutmut copies tests/ once (and regenerates a mutated file only when its source changed): a rerun
    # must see edited tests.
    shutil.rmtree(work / "mutants" / "tests", ignore_errors=True)
    return work


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the mutated copy must be the only statelens importable
    env["STATELENS_TEST_CACHE"] = env.get("STATELENS_TEST_CACHE", str(REPO / ".cache" / "checkpoints"))
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# Generates the mutants of the work folder in the current directory without testing them (what
# ``mutmut run`` does first), so that a sample can be drawn from their names.
_GENERATE = """
from pathlib import Path
from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants, setup_source_paths
from mutmut.mutation.trampoline import set_mutant_under_test
set_mutant_under_test("mutant_generation")
Path("mutants").mkdir(exist_ok=True)
copy_src_dir()
copy_also_copy_files()
setup_source_paths()
create_mutants(1)
"""


def generate(name: str) -> list[str]:
    """Generate the mutants of one work folder without testing them; returns their names."""
    done = subprocess.run(
        [sys.executable, "-c", _GENERATE],
        cwd=WORK / name,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name}: generating mutants failed:\n{done.stderr}")
    return sorted(results(name))


def stable_sample(names: list[str], size: int, seed: int) -> list[str]:
    """The ``size`` names whose seeded hash is smallest (sorted).

    A mutant is in the sample or not by its own name: mutants added or removed elsewhere in the code
    (whose names change when their function does) leave the rest of the sample as it was, as long as
    the sample's last member keeps its rank.
    """
    ranked = sorted(names, key=lambda n: hashlib.sha256(f"{seed}:{n}".encode()).hexdigest())
    return sorted(ranked[:size])


def module_of(mutant: str) -> str:
    """The file under ``readers/`` a mutant belongs to (``statelens.readers.logs.x_f__mutmut_3``: ``logs.py``)."""
    return mutant.split(".x", 1)[0].removeprefix("statelens.readers.").replace(".", "/") + ".py"


def sample(name: str, size: int, seed: int) -> list[str]:
    """Generate the module's mutants and draw ``size`` of them (seeded); saved for ``--report``."""
    names = generate(name)
    picked = stable_sample(names, size, seed)
    (WORK / name / "sample.json").write_text(json.dumps({"seed": seed, "of": len(names), "names": picked}))
    return picked


def run(name: str, max_children: int, names: list[str]) -> int:
    """Run mutmut over one module (only ``names`` when given); returns its exit code."""
    work = WORK / name
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names]
    return subprocess.run(cmd, cwd=work, env=_env(), check=False).returncode


def results(name: str) -> dict[str, str]:
    """Mutant name -> status of the last run of one module."""
    out: dict[str, str] = {}
    for f in MODULES[name].files:
        meta = WORK / name / "mutants" / "statelens" / "readers" / f"{f}.meta"
        if not meta.is_file():
            continue
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if code is None:
                out[key] = "not checked"
            elif code in _KILLED:
                out[key] = _KILLED[code]
            elif code in _CRASHED:
                out[key] = _CRASHED[code]
            elif code == 0:
                out[key] = "survived"
            elif code in (5, 33):
                out[key] = "no tests"
            else:
                out[key] = f"suspicious (exit {code})"
    return out


# Prints the diff of each mutant named in argv[1] (a JSON list), one block per mutant after a marker line.
_SHOW = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
for name, path in json.loads(sys.argv[1]):
    print("@@@mutant " + name)
    print(get_diff_for_mutant(name, path=path))
"""


def diffs(name: str, mutants: list[str]) -> dict[str, str]:
    """The diff of each of ``mutants`` (one process for all of them)."""
    if not mutants:
        return {}
    path = {m: m.split(".x", 1)[0].replace(".", "/") + ".py" for m in mutants}
    arg = json.dumps([[m, path[m]] for m in mutants])
    done = subprocess.run(
        [sys.executable, "-c", _SHOW, arg],
        cwd=WORK / name,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    out: dict[str, str] = {}
    for block in done.stdout.split("@@@mutant ")[1:]:
        head, _, body = block.partition("\n")
        out[head.strip()] = body.strip()
    for m in mutants:
        out.setdefault(m, done.stderr.strip()[-500:] or "(no diff)")
    return out


def _drawn(name: str) -> dict[str, str]:
    """Status of each mutant of the last run's sample (of every mutant without one)."""
    status = results(name)
    drawn = WORK / name / "sample.json"
    if status and drawn.is_file():
        status = {m: status.get(m, "not generated") for m in json.loads(drawn.read_text())["names"]}
    return status


def report(name: str, with_diffs: bool = True) -> tuple[int, int]:
    """Print one module's kill rate and surviving mutants; returns (killed, counted)."""
    status = _drawn(name)
    if not status:
        print(f"{name}: no results (run it first)")
        return 0, 0
    drawn = WORK / name / "sample.json"
    of = json.loads(drawn.read_text())["of"] if drawn.is_file() else 0
    equivalent = {m for m in status if m in EQUIVALENT}
    pending = sum(1 for s in status.values() if s == "not checked")
    counted = {m: s for m, s in status.items() if m not in equivalent and s != "not checked"}
    killed = sum(1 for s in counted.values() if s in ("killed", "timeout", "segfault"))
    left = sorted(m for m, s in counted.items() if s not in ("killed", "timeout", "segfault"))
    rate = 100.0 * killed / len(counted) if counted else 100.0
    files = ", ".join(f"readers/{f}" for f in MODULES[name].files)
    print(f"{name} ({files}): {killed}/{len(counted)} mutants killed = {rate:.1f}%", end="")
    if of:
        low, high = _wilson(killed, len(counted))
        print(f" (a sample of {len(status)} of {of}: 95% interval {low:.0f}-{high:.0f}%)", end="")
    print(f" ({len(equivalent)} equivalent left out)" if equivalent else "", end="")
    print(f" ({pending} not tested yet)" if pending else "")
    shown = diffs(name, left) if with_diffs else {}
    for m in left:
        print(f"  {counted[m]}: {m}")
        if m in shown:
            print("    " + shown[m].replace("\n", "\n    "))
    modules = {f.removesuffix(".py") for f in MODULES[name].files}
    generated = results(name)
    stale = [m for m in EQUIVALENT if m.split(".")[2] in modules and m not in generated]
    for m in stale:
        print(f"  listed as equivalent but no longer generated: {m}")
    return killed, len(counted)


def _wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``k / n``, in percent."""
    if n == 0:
        return 0.0, 100.0
    z = 1.96
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * (mid - half), 100 * (mid + half)


#: The CI run (``--ci``, the last step of ``scripts/test.sh``): per decoder module (file), the
#: ``CI_SAMPLE`` mutants that :func:`stable_sample` picks with ``CI_SEED``; the results go to ``SCORES``
#: (with ``--write``), and a module whose score is under ``FLOOR`` percent fails the run.
CI_SAMPLE = 30
CI_SEED = 0
FLOOR = 85.0
SCORES = REPO / "tests" / "mutation_scores.json"
#: Modules whose CI sample still scores under ``FLOOR``, and what their tests lack. Until tests raise
#: one to the floor, it fails the run only when it scores under its score in ``SCORES`` (a ratchet); once
#: it reaches the floor it fails the run until it leaves this list.
BELOW_FLOOR: dict[str, str] = {}
_KILLS = ("killed", "timeout", "segfault")


def _short(diff: str, lines: int = 8) -> str:
    """The changed lines of a mutant's diff (at most ``lines``)."""
    changed = [
        line.rstrip()
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return "\n".join(changed[:lines] + (["..."] if len(changed) > lines else []))


def ci_run(names: list[str], max_children: int) -> list[str]:
    """Test the CI sample of the given work folders from scratch; returns those where mutmut failed."""
    failed = []
    for name in names:
        prepare(name, fresh=True)
        every = generate(name)
        picked = []
        for f in MODULES[name].files:
            picked += stable_sample([m for m in every if module_of(m) == f], CI_SAMPLE, CI_SEED)
        drawn = {"seed": CI_SEED, "of": len(every), "names": sorted(picked)}
        (WORK / name / "sample.json").write_text(json.dumps(drawn))
        if run(name, max_children, sorted(picked)) != 0:
            failed.append(name)
    return failed


def ci_scores(names: list[str]) -> dict[str, dict[str, Any]]:
    """Per decoder file (``readers/...``): the CI sample's results, as ``SCORES`` keeps them."""
    scores: dict[str, dict[str, Any]] = {}
    for name in names:
        status = results(name)
        drawn = WORK / name / "sample.json"
        picked = json.loads(drawn.read_text())["names"] if drawn.is_file() else []
        for f in MODULES[name].files:
            every = [m for m in status if module_of(m) == f]
            mine = sorted(m for m in picked if module_of(m) == f)
            killed = [m for m in mine if status.get(m) in _KILLS]
            equivalent = [m for m in mine if m in EQUIVALENT and m not in killed]
            untested = [m for m in mine if status.get(m) in (None, "not checked")]
            left = [m for m in mine if m not in killed and m not in equivalent and m not in untested]
            for m in (m for m in killed if m in EQUIVALENT):
                print(f"listed in EQUIVALENT but killed, so not equivalent: {m}")
            shown = diffs(name, left)
            counted = len(mine) - len(equivalent) - len(untested)
            scores[f"readers/{f}"] = {
                "mutants": len(every),
                "sample": mine,
                "killed": len(killed),
                "survived": {m: f"{status[m]}: {_short(shown[m])}" for m in left},
                "equivalent": equivalent,
                "untested": untested,
                "score": round(100.0 * len(killed) / counted, 1) if counted else 0.0,
            }
    return scores


def ci_report(scores: dict[str, dict[str, Any]], write: bool) -> int:
    """Print the CI scores and how they differ from ``SCORES``; 1 if a module is under ``FLOOR``."""
    kept = json.loads(SCORES.read_text())["modules"] if SCORES.is_file() else {}
    low = []
    print(f"\nmutation scores, {CI_SAMPLE} mutants a module (seed {CI_SEED}), floor {FLOOR:.0f}%:")
    for module, entry in scores.items():
        survived, sample = entry["survived"], entry["sample"]
        equivalent, untested = entry["equivalent"], entry["untested"]
        line = (
            f"  {module}: {entry['killed']} killed of {len(sample)} sampled ({entry['mutants']} mutants), "
            f"{len(equivalent)} equivalent, {len(survived)} survived: {entry['score']:.1f}%"
        )
        before = kept.get(module)
        if untested:
            low.append(module)
            line += f"  {len(untested)} NOT TESTED"
        elif module in BELOW_FLOOR:
            if entry["score"] >= FLOOR:
                low.append(module)
                line += f"  REACHES {FLOOR:.0f}%: take it out of BELOW_FLOOR"
            elif before is not None and entry["score"] < before["score"]:
                low.append(module)
                line += f"  UNDER {FLOOR:.0f}% AND UNDER ITS COMMITTED {before['score']:.1f}%"
            else:
                line += f"  (under {FLOOR:.0f}%, listed in BELOW_FLOOR: not under its committed score)"
        elif entry["score"] < FLOOR:
            low.append(module)
            line += f"  UNDER {FLOOR:.0f}%"
        print(line)
        for m, text in survived.items():
            print(f"    survived {m}\n      " + str(text).replace("\n", "\n      "))
        if before is None:
            print(f"    not in {SCORES.name}")
        elif before["sample"] != sample:
            print(f"    the sample differs from {SCORES.name}'s (the code changed): --ci --write updates it")
        elif sorted(before["survived"]) != sorted(survived):
            print(f"    survivors differ from {SCORES.name}'s (was {before['score']:.1f}%)")
    if write:
        merged = {**kept, **scores}
        document = {
            "about": "python -m tests.mutation --ci --write: the CI sample of every decoder module's mutants",
            "mutmut": _mutmut_version(),
            "seed": CI_SEED,
            "per_module": CI_SAMPLE,
            "floor": FLOOR,
            "modules": {k: merged[k] for k in sorted(merged)},
        }
        SCORES.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        print(f"written to {SCORES.relative_to(REPO)}; its table for docs/testing.md:\n")
        print(table(document["modules"]))
    if low:
        print(
            f"under the floor of {FLOOR:.0f}% (or not fully tested, or off BELOW_FLOOR's terms): {', '.join(low)}"
        )
    return 1 if low else 0


def table(modules: dict[str, dict[str, Any]]) -> str:
    """The scores as docs/testing.md shows them (a Markdown table)."""
    rows = [
        "| module | mutants | sampled | killed | survived | equivalent | score |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for module, e in modules.items():
        rows.append(
            f"| `{module}` | {e['mutants']:,} | {len(e['sample'])} | {e['killed']} | {len(e['survived'])} "
            f"| {len(e['equivalent'])} | **{e['score']:.1f}%** |"
        )
    return "\n".join(rows)


def _mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=", ".join(MODULES))
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--no-diffs", action="store_true", help="list surviving mutants without their diffs")
    parser.add_argument("--max-children", type=int, default=1)
    parser.add_argument("--sample", type=int, default=0, metavar="N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retry", action="store_true")
    parser.add_argument("--ci", action="store_true", help="test the CI sample and compare it with the scores")
    parser.add_argument("--write", action="store_true", help="with --ci: write the scores file")
    args = parser.parse_args(argv)
    names = args.modules or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"unknown module {', '.join(unknown)}; known: {', '.join(MODULES)}")
    if args.ci:
        return _ci(names, args)
    failed = []
    if not args.report:
        from tests.mutation_plugin import missing_scenarios

        absent = missing_scenarios()
        if absent:
            print(f"not in the checkpoint cache, so their tests are left out: {', '.join(absent)}")
            print("(generate them with python -m tests.spark_checkpoints NAME ...)")
        for name in names:
            prepare(name, args.fresh and not args.retry)
            if args.retry:
                picked = [m for m, s in _drawn(name).items() if s not in ("killed", "timeout", "segfault")]
                if not picked:
                    continue
            else:
                picked = sample(name, args.sample, args.seed) if args.sample else []
                if not args.sample:
                    (WORK / name / "sample.json").unlink(missing_ok=True)
                else:  # a sample drawn before keeps the results it has (--retry tests survivors again)
                    status = results(name)
                    picked = [m for m in picked if status.get(m) == "not checked"]
                    if not picked:
                        continue
            if run(name, args.max_children, picked) != 0:
                failed.append(name)
    total_killed = total = 0
    for name in names:
        killed, counted = report(name, with_diffs=not args.no_diffs)
        total_killed += killed
        total += counted
    if total:
        print(f"all: {total_killed}/{total} killed = {100.0 * total_killed / total:.1f}%")
    for name in failed:
        print(f"{name}: mutmut failed (see its output above)")
    return 1 if failed else 0


def _ci(names: list[str], args: argparse.Namespace) -> int:
    """``--ci``: test the CI sample from scratch (``--report``: the last one again), report, compare."""
    start = time.monotonic()
    failed: list[str] = []
    if not args.report:
        from tests.mutation_plugin import missing_scenarios

        absent = missing_scenarios()
        if absent:
            print(f"not in the checkpoint cache: {', '.join(absent)}; the CI sample needs every scenario")
            return 1
        failed = ci_run(names, args.max_children)
    code = ci_report(ci_scores(names), args.write)
    for name in failed:
        print(f"{name}: mutmut failed (see its output above)")
    print(f"mutation testing took {time.monotonic() - start:.0f} s")
    return 1 if failed else code


if __name__ == "__main__":
    sys.exit(main())
