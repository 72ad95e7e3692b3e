"""Draw docs/screenshots/follow.png: the app following a checkpoint as its batches commit.

A copy of the bundled sample is written batch by batch (each batch's offsets, state files, then commit,
as Spark writes them: ``tests/_growing.py``) into a temporary folder while the app, offscreen, follows
it; after the last batch's poll the window is grabbed at the size of ``statelens gui --screenshot``.

Usage (from the repository root)::

    QT_QPA_PLATFORM=offscreen python scripts/follow_screenshot.py [OUT.png] [--view growth]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Batches of the sample written before the app opens the copy; the rest commit while it follows.
OPENED_AT = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(REPO / "docs" / "screenshots" / "follow.png"))
    parser.add_argument("--view", default="growth")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(REPO))

    from PySide6.QtCore import QEventLoop, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from statelens.app.gui.main import SCREENSHOT_SIZE, _configure_pyqtgraph
    from statelens.app.gui.window import MainWindow
    from statelens.app.resources import sample_checkpoint_path
    from tests._growing import GrowingCheckpoint

    app = QApplication.instance() or QApplication(["statelens"])
    _configure_pyqtgraph()

    def wait(done: object, timeout_ms: int = 120_000) -> None:
        loop = QEventLoop()
        poll = QTimer()
        poll.timeout.connect(lambda: loop.quit() if done() else None)  # type: ignore[operator]
        poll.start(50)
        QTimer.singleShot(timeout_ms, loop.quit)
        loop.exec()
        poll.stop()
        if not done():  # type: ignore[operator]
            raise SystemExit("timed out")

    def newest_start_ms(win: MainWindow) -> int:
        ckpt = win.loaded.checkpoint if win.loaded is not None else None
        last = ckpt.last_committed_batch_id if ckpt is not None else None
        entry = ckpt.offsets.get(last) if ckpt is not None and last is not None else None
        return int(entry.timestamp_ms) if entry is not None and entry.timestamp_ms is not None else 0

    with tempfile.TemporaryDirectory(prefix="statelens-follow-") as tmp:
        live = Path(tmp) / "live-query"
        grown = GrowingCheckpoint(sample_checkpoint_path(), live)
        grown.write_until(OPENED_AT)
        settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
        win = MainWindow(settings=settings)
        win.set_backend("native", remember=False)
        win.set_times_in_utc(True, remember=False)
        win.resize(*SCREENSHOT_SIZE)
        win.select_view(args.view)
        win.show()
        win.open_checkpoint(str(live))
        wait(lambda: win.loaded is not None and win.settled())
        # The status line as the query writes: polled three seconds after the newest batch started.
        win.follow.clock = lambda: newest_start_ms(win) + 3000
        win.follow.set_interval(5)
        win.follow.set_following(True)
        wait(lambda: win.follow.log.last is not None and win.settled())
        while grown.written < grown.batches[-1]:
            grown.write_batch()
            if grown.written == grown.batches[-1] - 1:
                grown.write_batch()  # two batches between the last two polls
            before = win.follow.log.last
            wait(lambda: win.settled())
            win.follow.poll_now()
            wait(lambda b=before: win.follow.log.last is not b and win.settled())  # type: ignore[misc]
        for _ in range(3):
            app.processEvents()
        ok = win.grab().save(args.out, "PNG")
        print(win.follow.label.text())
        win.close()
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
