"""The ``statelens`` console script: the command line, and the desktop app when asked for.

Kept apart from :mod:`app.cli` so that the command line never imports Qt: only this module knows
where the GUI lives; :mod:`app.gui.main` imports Qt only when the ``gui`` command (or no command) runs.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

# A choice for the whole process, made before numpy loads (the API, a library, leaves it to its caller):
# statelens does no linear algebra, and OpenBLAS would start a thread per core that spins for a while
# after numpy's import, about 0.1 s of CPU in every command. A value the user set stands.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# The imports below make objects that live as long as the process (modules, functions, classes) and
# almost no garbage: the garbage collector is off while they run (its passes over the young objects
# took ~8 ms of every start), and what they made goes straight to the oldest generation (frozen and
# given back at once), which :func:`main` leaves out of the passes while the command runs.
_collecting = gc.isenabled()
gc.disable()
try:
    from statelens.app import allocator  # noqa: E402  (after the choice above)
    from statelens.app.cli import main as cli_main  # noqa: E402
    from statelens.app.gui.main import run_gui, startup_objects_frozen  # noqa: E402
finally:
    gc.freeze()
    gc.unfreeze()
    if _collecting:
        gc.enable()


def _run_gui(args: Any) -> int:
    return int(run_gui(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``statelens``.

    The objects the imports made (modules, functions, classes: ~30,000 that the collector tracks, there
    for the whole command) are left out of the garbage collector's passes while the command runs
    (:func:`app.gui.main.startup_objects_frozen`, as the app does once its window is built): a full
    pass walked them all again (fresh ``growth --json`` on the 2M-key store: ~18 ms of its ~0.46 s of
    CPU in collections, ~4 ms with them left out).
    """
    allocator.tune()
    with startup_objects_frozen():
        return cli_main(argv, gui_runner=_run_gui)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
