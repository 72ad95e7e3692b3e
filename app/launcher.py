"""The ``statelens`` console script: the command line, and the desktop app when asked for.

Kept apart from :mod:`app.cli` so that the command line never imports Qt: only this module knows
where the GUI lives; :mod:`app.gui.main` imports Qt only when the ``gui`` command (or no command) runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from statelens.app import allocator
from statelens.app.cli import main as cli_main
from statelens.app.gui.main import run_gui


def _run_gui(args: Any) -> int:
    return int(run_gui(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``statelens``."""
    allocator.tune()
    return cli_main(argv, gui_runner=_run_gui)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
