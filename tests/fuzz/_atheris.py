"""Run one target of :mod:`tests.fuzz.targets` under atheris (libFuzzer), with the decoders instrumented.

Usage (what :mod:`tests.fuzz.run` does)::

    python -m tests.fuzz.fuzz_codecs NEW_CORPUS_DIR tests/fuzz/corpus/codecs -max_total_time=60 \
        -rss_limit_mb=2048 -timeout=10

Besides libFuzzer's ``-rss_limit_mb`` (checked once a second), the address space is capped at the
process's size after start-up plus ``STATELENS_FUZZ_AS_MB`` (default 2048) MiB, so one huge allocation
fails at once as a ``MemoryError``: a crash, never a ``StatelensError``.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any


def _cap_address_space() -> None:
    extra = int(os.environ.get("STATELENS_FUZZ_AS_MB", "2048")) << 20
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    limit = pages * os.sysconf("SC_PAGE_SIZE") + extra
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or limit < hard:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


#: Targets whose decoders compare numpy arrays: atheris traces every comparison of instrumented code
#: (``trace_dataflow``) and leaks memory on array comparisons (``decode_rows`` grew by 724 MB in 137k
#: runs with it, stays flat without it, and uninstrumented in-process loops stay flat too), which ends a
#: long run in a false out-of-memory. They keep coverage instrumentation, without comparison tracing
#: (``cf_rows`` decodes rows through ``decode_rows`` too: 1.3 GB after 1.9M runs with it).
_NO_DATAFLOW = {"unsaferow", "cf_rows"}

#: Standard-library modules a target's input goes through before statelens code sees it; they are
#: instrumented too (they were imported before the hook), so coverage follows the zip parser.
_ALSO_INSTRUMENTED = {"rocksdb_zip": ("zipfile",)}


def _instrument_modules(names: tuple[str, ...]) -> None:
    import importlib
    import inspect

    import atheris

    for module_name in names:
        module = importlib.import_module(module_name)
        for obj in list(vars(module).values()):
            members = vars(obj).values() if inspect.isclass(obj) else (obj,)
            for member in members:
                func = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                if inspect.isfunction(func) and func.__module__ == module_name:
                    atheris.instrument_func(func)


def _instrumented(name: str) -> Any:
    import atheris

    if name in _NO_DATAFLOW:
        from atheris.import_hook import HookManager

        # atheris hooks whole top-level packages (instrument_imports keeps only the first name part too)
        return HookManager({"statelens"}, set(), True, trace_dataflow=False)
    return atheris.instrument_imports(include=["statelens.readers"])


def main(name: str) -> None:
    """Fuzz the target ``name`` with the command-line arguments libFuzzer understands."""
    import atheris

    with _instrumented(name):
        from tests.fuzz import targets

    target = targets.TARGETS[name]
    _instrument_modules(_ALSO_INSTRUMENTED.get(name, ()))
    if name == "unsaferow":
        targets.unsaferow_layouts()  # compile the schemas (PySpark types) before the first input
    if os.path.exists("/proc/self/statm"):
        _cap_address_space()
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()
