"""The user documentation stays true to the code: the command line reference is the parser's, and the
console blocks of the README and docs/ show what their commands print."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from statelens.app.cli import build_parser

REPO = Path(__file__).resolve().parent.parent


def _load(name: str) -> ModuleType:
    """A script of scripts/ as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cli_reference() -> ModuleType:
    return _load("cli_reference")


def test_committed_cli_reference_is_the_parsers() -> None:
    committed = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == _cli_reference().render(), (
        "docs/cli.md differs from the argument parser: run python scripts/cli_reference.py"
    )


def test_cli_reference_names_every_command_and_option() -> None:
    # Independent of the renderer: walk the parser and look for each command heading and option string.
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert commands.choices, "the parser has no commands"
    for name, sub in commands.choices.items():
        section = page.split(f"\n## statelens {name}\n", 1)
        assert len(section) == 2, f"no section for 'statelens {name}'"
        body = section[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in body or f", {option}" in body, f"{name} {option} not documented"


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    module = _cli_reference()
    stale = tmp_path / "cli.md"
    stale.write_text(module.render().replace("## statelens expired\n", "## statelens expired (old)\n"))
    module.PAGE = stale
    assert module.main(["--check"]) == 1
    module.PAGE = tmp_path / "fresh.md"
    assert module.main([]) == 0
    assert module.main(["--check"]) == 0
    assert (tmp_path / "fresh.md").read_text() == module.render()


def test_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; reference material belongs in docs/"


def test_readme_links_resolve() -> None:
    # README.md is not part of the MkDocs site, whose --strict build checks the links of docs/.
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert targets, "README.md links to no page"
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _doc_outputs() -> ModuleType:
    return _load("doc_outputs")


@pytest.mark.slow
def test_console_blocks_show_what_their_commands_print() -> None:
    # The walkthrough's doctor, expired, sql, rows and report runs on the bundled sample, as committed.
    assert _doc_outputs().main(["--check"]) == 0, "run python scripts/doc_outputs.py"


def test_doc_outputs_replaces_a_stale_output(tmp_path: Path) -> None:
    (tmp_path / "resources").symlink_to(REPO / "resources")
    page = "text\n\n```console\n$ statelens expired resources/sample_checkpoint --jsonl | wc -l\n99\n```\n"
    assert _doc_outputs().render(page, tmp_path) == page.replace("\n99\n", "\n6\n")
