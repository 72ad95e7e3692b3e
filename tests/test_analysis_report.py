"""The self-contained HTML post-mortem report, checked as text and in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from statelens.app.analysis._common import run_to_end
from statelens.app.analysis.doctor import iter_doctor
from statelens.app.analysis.expired import ExpiredFinding, iter_expired
from statelens.app.analysis.growth import iter_growth
from statelens.app.analysis.report import render_html
from statelens.app.analysis.svg import bar_chart, line_chart, nice_ticks
from statelens.app.analysis.timeline import iter_timeline
from statelens.app.cli import main
from statelens.readers.checkpoint import open_checkpoint
from statelens.readers.values import JsonObject

SECTIONS = ("overview", "timeline", "growth", "zombies", "doctor")
EVIL = "<script>alert('x')</script>"


def _assert_self_contained(text: str) -> None:
    assert "<script" not in text.lower()
    assert not re.search(r"(https?:)?//[\w.-]+\.\w", text), "external URL in the report"
    assert not re.search(r"\b(src|href)\s*=\s*[\"'](?!#)", text), "a reference that is not an in-page anchor"
    assert "@import" not in text
    assert "url(" not in text


@pytest.mark.spark
def test_report_cli_has_every_section_and_no_external_reference(checkpoint, tmp_path):
    folder = checkpoint("pandas_state_event")
    expected = json.loads((folder / "expected.json").read_text())
    out = tmp_path / "report.html"
    assert main(["report", str(folder / "checkpoint"), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    for sec in SECTIONS:
        assert f'<section id="{sec}">' in text
    _assert_self_contained(text)
    # Every plot is an inline SVG with a title and labelled axes.
    svgs = re.findall(r"<svg\b.*?</svg>", text, re.S)
    assert len(svgs) >= 6
    assert "interval (s)" in text
    assert "state version (= batch id + 1)" in text
    assert "size (bytes)" in text
    # The leaked keys are listed among the top keys.
    for key in expected["leaked"]:
        assert f"<td>{key}</td>" in text
    assert "event_time (inferred)" in text


@pytest.mark.spark
def test_untrusted_text_is_escaped(checkpoint, tmp_path):
    folder = checkpoint("pandas_state_event")
    # An evil folder name (shown as the location) and an evil conf value (shown in the conf changes).
    ckpt_dir = tmp_path / EVIL.replace("/", "_")
    shutil.copytree(folder / "checkpoint", ckpt_dir)
    offsets = ckpt_dir / "offsets" / "1"
    lines = offsets.read_text().split("\n")
    meta = json.loads(lines[1])
    meta["conf"]["spark.sql.streaming.stateStore.compression.codec"] = EVIL
    lines[1] = json.dumps(meta)
    offsets.write_text("\n".join(lines))
    ckpt = open_checkpoint(str(ckpt_dir))
    timeline = run_to_end(iter_timeline(ckpt))
    expired = run_to_end(iter_expired(ckpt))
    growth = run_to_end(iter_growth(ckpt))
    doctor = run_to_end(iter_doctor(ckpt, decode_files=False))
    # A key holding markup, as a decoded key would arrive from a state file.
    expired.add(
        ExpiredFinding(
            0,
            "default",
            0,
            7,
            2,
            "zombie",
            JsonObject([("key", EVIL)]),
            1,
            2,
            "event_time",
            1,
            1,
            1,
            EVIL,
        )
    )
    text = render_html(ckpt, timeline, growth, expired, doctor, target_rows=100)
    assert EVIL not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;_script&gt;" in text  # the folder name
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text  # key, note and conf value
    _assert_self_contained(text)


def test_charts_escape_labels_and_have_axes():
    svg = line_chart(
        [(EVIL, [1, 2, 3], [5, None, 7]), ("b", [1, 2, 3], [1, 2, 3])],
        title=EVIL,
        x_label="batch id",
        y_label="rows",
    )
    assert EVIL not in svg
    assert svg.count("<polyline") == 1  # the gap splits the first line into single points
    assert "batch id" in svg
    assert "rows" in svg
    bars = bar_chart(["a", EVIL], [("s", [1.0, 2.0])], title="t", x_label="x (unit)", y_label="y (unit)")
    assert EVIL not in bars
    assert "&lt;script&gt;" in bars
    assert nice_ticks(0, 7) == [0, 2, 4, 6, 8]
    assert nice_ticks(0, 0.3, min_step=1.0) == [0, 1]
    assert "no data" in line_chart([], title="t", x_label="x", y_label="y")


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.spark
@pytest.mark.slow
def test_report_renders_in_headless_chromium(checkpoint, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless Chromium on this machine (Debian package: chromium)")
    folder = checkpoint("pandas_state_event")
    html_path = tmp_path / "report.html"
    assert main(["report", str(folder / "checkpoint"), "-o", str(html_path)]) == 0
    shots = {}
    for sec in ("timeline", "growth", "zombies"):
        # One page per section so each screenshot shows that section's plots from the top.
        text = html_path.read_text(encoding="utf-8")
        head = text[: text.index("<body>") + len("<body>")]
        body = re.search(rf'<section id="{sec}">.*?</section>', text, re.S).group(0)
        page = tmp_path / f"{sec}.html"
        page.write_text(head + body + "</body></html>", encoding="utf-8")
        png = tmp_path / f"{sec}.png"
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1100,1400",
                f"--screenshot={png}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        assert _png_size(png) == (1100, 1400)
        shots[sec] = png.stat().st_size
    # A blank page compresses to a few KB; pages with plots and tables are far larger.
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1100,1400",
            f"--screenshot={tmp_path / 'blank.png'}",
            blank.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    empty = (tmp_path / "blank.png").stat().st_size
    for sec, size in shots.items():
        assert size > 5 * empty, f"{sec} screenshot looks blank ({size} bytes vs {empty})"
