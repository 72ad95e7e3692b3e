"""Shared pytest setup for statelens.

* The process runs in UTC (``TZ=UTC``) and Qt renders offscreen — set at import, before any test
  module imports PySpark or Qt.
* The decoded-state cache (``readers/cache.py``) lives in a temporary folder of the run.
* ``spark``: the one SparkSession of the test run (started lazily, only by tests that ask for it).
* ``checkpoint``: ``checkpoint("agg_count")`` → the scenario folder (``checkpoint/``, ``expected.json``,
  ``output.json``, ``input/``) of a real checkpoint written by PySpark, generated on first use and
  cached on disk across runs (see ``tests/spark_checkpoints.py``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ["TZ"] = "UTC"
if hasattr(time, "tzset"):
    time.tzset()
os.environ["QT_QPA_PLATFORM"] = "offscreen"
# The decoded-state cache of the run: a folder of its own, never the user's cache (tests that look at
# the cache set their own).
if "STATELENS_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["STATELENS_CACHE_DIR"] = tempfile.mkdtemp(prefix="statelens-test-cache-")
    atexit.register(shutil.rmtree, os.environ["STATELENS_CACHE_DIR"], ignore_errors=True)
# Files read from S3 are not mirrored locally unless a test asks for it: a test counting requests must
# not find the files an earlier test read (tests of the mirror set STATELENS_MIRROR=1 and their own folder).
os.environ.setdefault("STATELENS_MIRROR", "0")
# Spark's Python workers (pandas UDFs, applyInPandasWithState) run the test run's interpreter, whatever
# `python3` is first on PATH: its pandas and pyarrow are the ones the tests installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def pytest_configure(config: pytest.Config) -> None:
    # PySpark 4.3.0 warns on import of its pandas helpers when pandas >= 3 is installed; nothing we
    # can act on (the warning text is the only stable handle).
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas >= 3:FutureWarning"
    )


@pytest.fixture(scope="session")
def spark() -> Any:
    """The process-wide SparkSession (local[2], UTC, no UI)."""
    from tests.oracle import spark_session

    return spark_session()


@pytest.fixture
def shared_spark_cli(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The CLI's backends use the test run's SparkSession instead of starting a second JVM."""
    import statelens.app.cli._common
    from statelens.readers.backends import BackendChooser

    monkeypatch.setattr(
        statelens.app.cli._common,
        "_backends",
        lambda args, ckpt: BackendChooser(ckpt, args.backend, spark=spark),
    )
    return spark


@pytest.fixture(scope="session")
def checkpoint() -> Callable[[str], Path]:
    """Factory: ``checkpoint(name)`` → ``Path`` of the generated scenario folder (cached on disk)."""
    from tests.spark_checkpoints import get_checkpoint

    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = get_checkpoint(name)
        return cache[name]

    return get


GENERATOR_TESTS = Path(__file__).resolve().parent / "generator"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under ``tests/generator/`` check the checkpoint generator, not statelens: mark them."""
    for item in items:
        if GENERATOR_TESTS in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.generator)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Count the generator's checks apart from statelens's tests."""
    counts: dict[tuple[bool, str], int] = {}
    for outcome in ("passed", "failed", "error", "skipped", "xfailed", "xpassed"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") not in ("call", "setup") or (
                report.when == "setup" and outcome == "passed"
            ):
                continue
            generator = "generator" in getattr(report, "keywords", {})
            counts[(generator, outcome)] = counts.get((generator, outcome), 0) + 1
    if not counts:
        return

    def line(generator: bool) -> str:
        parts = [f"{n} {o}" for (g, o), n in sorted(counts.items()) if g == generator]
        return ", ".join(parts) or "none run"

    terminalreporter.write_line(f"statelens tests: {line(False)}; checkpoint generator checks: {line(True)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if anything imported the repository's folders under their bare names (``app``,
    ``readers``, ``viewers``) instead of ``statelens.*``: each module would then exist twice, with two
    copies of every class and module state."""
    bare = sorted(m for m in sys.modules if m.split(".")[0] in ("app", "readers", "viewers"))
    if bare:
        sys.stderr.write(
            f"\nstatelens tests: modules imported without the statelens root: {', '.join(bare[:10])}\n"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# -- S3 on loopback (tests/test_fs_s3.py, test_fs_concurrent.py, test_mirror.py) ----------------------------
@pytest.fixture(scope="module")
def moto_endpoint() -> Any:
    """moto's S3 server on loopback (one per test module), its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local_checkpoint(checkpoint: Callable[[str], Path]) -> Path:
    """The agg_count checkpoint on local disk, which the S3 tests upload and compare with."""
    return Path(checkpoint("agg_count")) / "checkpoint"


@pytest.fixture
def proxy(moto_endpoint: str) -> Any:
    """A fault-injecting proxy in front of moto (:class:`tests.test_fs_s3.FaultProxy`), on its own thread."""
    import threading
    import urllib.parse

    from tests.test_fs_s3 import FaultProxy

    parsed = urllib.parse.urlparse(moto_endpoint)
    server = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 80))
    thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
