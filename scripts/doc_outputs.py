"""Run the commands of the documentation's console blocks and write their real output under them.

A console block (```` ```console ````) holds commands after ``$ `` and, under each, what it printed. This
script runs each command from a temporary folder where ``resources/`` is the repository's (so
``resources/sample_checkpoint`` is the bundled sample), with ``statelens`` being this tree's command line,
and puts what it printed (standard output and error, in order) under it. ``tests/test_docs.py`` fails when
a committed block differs from what its commands print, so the walkthrough cannot drift from the code.

Outputs are shown as run from a clone in ``/tmp/statelens``: the folder they ran in, and the repository's
own path, are written so.

Usage (from the repository root)::

    python scripts/doc_outputs.py          # rewrite the outputs in README.md and docs/
    python scripts/doc_outputs.py --check  # exit 1 and show what differs
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/commands.md")
CLONE = "/tmp/statelens"

_BLOCK = re.compile(r"(```console\n)(.*?)(```)", re.S)


def _commands(block: str) -> list[tuple[list[str], list[str]]]:
    """``(command lines, output lines)`` of one console block; a quoted argument may span lines."""
    lines = block.rstrip("\n").split("\n")
    out: list[tuple[list[str], list[str]]] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(f"a console block must start with a '$ ' command, not {lines[i]!r}")
        command = [lines[i]]
        i += 1
        while "\n".join(command).count('"') % 2 and i < len(lines):
            command.append(lines[i])
            i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        out.append((command, output))
    return out


def _run(command: list[str], cwd: Path) -> list[str]:
    script = "\n".join(command)[2:]
    shell = f'statelens() {{ "{sys.executable}" -m statelens.app.cli "$@"; }}\n{{ {script}\n}} 2>&1'
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}
    done = subprocess.run(
        ["bash", "-c", shell], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    text = done.stdout.replace(str(cwd), CLONE).replace(str(REPO), CLONE).rstrip("\n")
    return text.split("\n") if text else []


def render(page: str, cwd: Path) -> str:
    """One page with the output of each console block's commands as they print it now.

    Parameters
    ----------
    page : str
        The Markdown text.
    cwd : Path
        Folder the commands run in (files they write land there).

    Returns
    -------
    str
        The page, console outputs replaced.
    """

    def block(match: re.Match[str]) -> str:
        lines = []
        for command, _ in _commands(match.group(2)):
            lines += [*command, *_run(command, cwd)]
        return match.group(1) + "\n".join(lines) + "\n" + match.group(3)

    return _BLOCK.sub(block, page)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the pages' console outputs, or with ``--check`` compare only (exit 1 when one differs)."""
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--check", action="store_true", help="compare only; exit 1 when an output differs")
    check = args.parse_args(argv).check
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "resources").symlink_to(REPO / "resources")
        for name in PAGES:
            path = REPO / name
            before = path.read_text(encoding="utf-8")
            after = render(before, Path(tmp))
            if after != before:
                stale.append(name)
                if not check:
                    path.write_text(after, encoding="utf-8")
    if check and stale:
        sys.stderr.write(f"console output differs in {', '.join(stale)}: run python scripts/doc_outputs.py\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
