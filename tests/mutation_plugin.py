"""pytest plugin of ``python -m tests.mutation``: only tests that start no JVM, checkpoints from the cache.

* Deselects every test that asks for the ``spark`` fixture (a SparkSession, so a JVM), and every test
  parametrised with a ``scenario`` that is not in the checkpoint cache (``python -m tests.mutation``
  names those scenarios before it runs).
* Gives each test session its own decoded-state cache folder and temporary folder: mutmut forks the
  sessions from one process, whose folders (and their removal at exit) they would otherwise share.
* Empties the UnsafeRow layout cache before each test: mutmut tests each mutant in a process forked
  from one that already ran the tests, so a layout compiled there would hide a mutant of the compiler.
* ``get_checkpoint`` (``tests/spark_checkpoints.py``) returns a cached scenario and raises, instead of
  starting Spark to generate it, when the scenario is not in the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

_OWN: list[str] = []  # the folders this session made (removed when it ends)


def pytest_configure(config: pytest.Config) -> None:
    import os
    import tempfile

    # mutmut forks every test session from one process: each gets a decoded-state cache and a pytest
    # temporary folder of its own (the inherited ones are shared, and removed when any session exits).
    _OWN.extend(
        [
            tempfile.mkdtemp(prefix="statelens-mutation-cache-"),
            tempfile.mkdtemp(prefix="statelens-mutation-tmp-"),
        ]
    )
    os.environ["STATELENS_CACHE_DIR"], config.option.basetemp = _OWN[-2:]
    from tests import spark_checkpoints

    generate = spark_checkpoints.get_checkpoint

    def cached_only(name: str, spark: Any = None, **kwargs: Any) -> Path:
        if spark is None and not (spark_checkpoints.cache_root() / name / "expected.json").is_file():
            raise RuntimeError(
                f"checkpoint {name!r} is not in {spark_checkpoints.cache_root()}: mutation runs start no "
                f"JVM; generate it first with `python -m tests.spark_checkpoints {name}`"
            )
        return generate(name, spark, **kwargs)

    spark_checkpoints.get_checkpoint = cached_only  # type: ignore[assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    while _OWN:
        shutil.rmtree(_OWN.pop(), ignore_errors=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    import sys

    unsaferow = sys.modules.get("statelens.readers._format.unsaferow")
    if unsaferow is not None:
        unsaferow._CACHE.clear()


def missing_scenarios() -> list[str]:
    """Scenarios of ``tests/spark_checkpoints.py`` that are not in the checkpoint cache."""
    from tests import spark_checkpoints

    root = spark_checkpoints.cache_root()
    return [name for name in spark_checkpoints.SCENARIOS if not (root / name / "expected.json").is_file()]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = set(missing_scenarios())

    def left_out(item: pytest.Item) -> bool:
        if "spark" in getattr(item, "fixturenames", ()):
            return True
        callspec = getattr(item, "callspec", None)
        return callspec is not None and callspec.params.get("scenario") in missing

    out = [item for item in items if left_out(item)]
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = [item for item in items if not left_out(item)]
