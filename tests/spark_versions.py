"""Checkpoints written by older Spark versions (3.4, 3.5), each from its own cached virtual environment.

Most production clusters still run Spark 3.x. The scenarios of :mod:`tests.spark_checkpoints` that exist
there (aggregation, window + watermark, dropDuplicates, stream-stream join, applyInPandasWithState with
both timeout kinds on HDFS and on RocksDB, a codec other than lz4) are written by that PySpark, run as a
subprocess of ``<repo>/.cache/venvs/pyspark-<version>/bin/python -m tests.spark_checkpoints``; the
venv is created on first use (``python -m venv`` + pip, pinned to what those releases support on
Python 3.11: numpy < 2, pandas < 2.2, pyarrow < 15). Checkpoints are cached like the 4.x ones under
``<cache>/pyspark-<version>-<sha1 of spark_checkpoints.py[:12]>/<scenario>/``.

When a venv cannot be made (no network, no pip), the tests fail with pip's message: never a silent skip.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.spark_checkpoints import _SOURCE_HASH, REPO, SCENARIOS

#: Writer versions tested besides the suite's own PySpark (the latest patch of each line).
WRITER_VERSIONS = ("3.4.4", "3.5.5")

#: What those PySpark releases need on Python 3.11 (pandas and pyarrow for applyInPandasWithState).
_PINS = ("numpy<2", "pandas>=1.5,<2.2", "pyarrow>=12,<15")

#: The scenarios Spark 3.4/3.5 can write (no transformWithState, no row checksums, no join format 3/4).
VERSIONED_SCENARIOS = (
    "agg_count",
    "window_agg_watermark",
    "dedup_watermark",
    "join",
    "pandas_state_event",
    "pandas_state_processing",
    "rocks_agg_changelog",
    "rocks_pandas_state",
    "rocks_pandas_state_processing",
    "codec_zstd",
)


class WriterUnavailable(RuntimeError):
    """The PySpark of a writer version could not be installed (the message says why)."""


def venv_root() -> Path:
    return Path(os.environ.get("STATELENS_VENV_CACHE", REPO / ".cache" / "venvs"))


def writer_python(version: str) -> Path:
    """The python of the cached venv holding PySpark ``version`` (created on first use, under a lock)."""
    root = venv_root()
    venv = root / f"pyspark-{version}"
    python = venv / "bin" / "python"
    ready = venv / ".statelens-ready"
    if ready.is_file():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".pyspark-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be creating it
        if ready.is_file():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                f"pyspark=={version}",
                *_PINS,
            ],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise WriterUnavailable(
                    f"cannot install PySpark {version} into {venv}: {' '.join(cmd)} failed:\n{tail}"
                )
        ready.write_text(version)
    return python


def cache_dir(version: str) -> Path:
    base = os.environ.get("STATELENS_TEST_CACHE")
    root = Path(base) if base else REPO / ".cache" / "checkpoints"
    return root / f"pyspark-{version}-{_SOURCE_HASH}"


def versioned_checkpoint(version: str, name: str) -> Path:
    """The scenario folder of ``name`` written by PySpark ``version`` (generated on first use)."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}")
    out = cache_dir(version)
    folder = out / name
    if (folder / "expected.json").is_file():
        return folder
    python = writer_python(version)
    env = {**os.environ, "TZ": "UTC", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}
    env.pop("SPARK_HOME", None)
    env.pop("PYSPARK_PYTHON", None)  # the writer's workers run its own venv's python, not the test run's
    proc = subprocess.run(
        [str(python), "-m", "tests.spark_checkpoints", name, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0 or not (folder / "expected.json").is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"PySpark {version} could not write scenario {name!r}:\n{tail}")
    return folder
