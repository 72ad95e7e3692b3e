"""The distribution as a user gets it: a wheel built from this repository, installed into a clean virtual
environment, run from a folder outside the source tree.

* The wheel has one import root, ``statelens`` (no generic ``app``/``readers``/``viewers`` packages that
  would collide with other distributions), and carries the bundled sample checkpoint whole, Spark's
  hidden ``.crc`` files included.
* Installed with its dependencies into a new venv, ``statelens`` opens the sample with no path given (the
  app renders it offscreen) and ``statelens info`` reads it; nothing comes from the source tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "resources" / "sample_checkpoint"

pytestmark = pytest.mark.slow


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no virtual environment of ours."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra)
    return env


def _run(
    args: list[str | Path], cwd: Path, timeout: int = 900, **env: str
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, f"{args}\nstdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this repository (as `pip wheel .` builds it for `pip install .`)."""
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            str(REPO),
            "-w",
            out,
        ],
        cwd=out,
    )
    (whl,) = out.glob("statelens-*.whl")
    return whl


def test_wheel_has_one_import_root_and_the_whole_sample(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    roots = {n.split("/")[0] for n in names}
    assert roots == {"statelens", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    shipped = {
        n.removeprefix("statelens/resources/sample_checkpoint/")
        for n in names
        if n.startswith("statelens/resources/sample_checkpoint/")
    }
    in_repo = {p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob("*") if p.is_file()}
    assert in_repo and shipped == in_repo  # hidden .crc files too
    assert any(n.endswith("/.metadata.crc") for n in names)
    assert "statelens/resources/icons/statelens.png" in names
    for package in ("app", "readers", "viewers", "app/gui", "app/analysis", "readers/backends"):
        assert f"statelens/{package}/__init__.py" in names


def test_installed_wheel_opens_the_sample_outside_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()

    where = _run(
        [
            py,
            "-c",
            "import statelens, statelens.app.resources as r; print(statelens.__file__);"
            " print(r.sample_checkpoint_path())",
        ],
        cwd=work,
    ).stdout.splitlines()
    assert where[0].startswith(str(env_dir)), where
    sample = Path(where[1])
    assert sample.is_relative_to(env_dir) and (sample / "metadata").is_file()
    generic = subprocess.run(
        [py, "-c", "import app"], cwd=work, env=_clean_env(), capture_output=True, text=True, check=False
    )
    assert "No module named 'app'" in generic.stderr

    statelens = env_dir / "bin" / "statelens"
    assert "usage: statelens" in _run([statelens, "--help"], cwd=work).stdout
    info = json.loads(_run([statelens, "info", sample, "--json"], cwd=work).stdout)
    expected_id = json.loads((SAMPLE / "metadata").read_text().splitlines()[0])["id"]
    assert info["query_id"] == expected_id

    # The library: statelens.open from the installed wheel, typed (py.typed shipped).
    api = _run(
        [
            py,
            "-c",
            "import statelens, sys, pathlib; ck = statelens.open(sys.argv[1]);"
            " print(ck.query_id); print(ck.state().to_arrow().num_rows);"
            " print((pathlib.Path(statelens.__file__).parent / 'py.typed').is_file())",
            sample,
        ],
        cwd=work,
    ).stdout.splitlines()
    assert api[0] == expected_id
    assert int(api[1]) > 0
    assert api[2] == "True"

    # No path: the app opens the bundled sample (rendered offscreen to a PNG).
    png = work / "sample.png"
    _run([statelens, "gui", "--screenshot", png, "--view", "overview"], cwd=work, QT_QPA_PLATFORM="offscreen")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
