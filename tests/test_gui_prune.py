"""The expired view's "Prune these keys into a copy..." dialog: the dry run first, then the copy and its
proof, a refusal in words; on the bundled sample and a transformWithState checkpoint (refused)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

import statelens.app.gui  # noqa: E402,F401 - applies the PySide6 refcount guard before any signal is emitted
from statelens.app.prune import Selection  # noqa: E402
from statelens.app.resources import sample_checkpoint_path  # noqa: E402
from statelens.readers.checkpoint import open_checkpoint  # noqa: E402
from tests.test_prune import _tree_hash  # noqa: E402

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")
TIMEOUT_MS = 60_000


def _dialog(qtbot: Any, ckpt: Any, selection: Selection) -> Any:
    from statelens.app.gui.prune_dialog import PruneDialog
    from statelens.app.gui.workers import JobRunner

    runner = JobRunner()
    dialog = PruneDialog(ckpt, selection, runner)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog, runner


def test_dry_run_then_copy_with_proof(qtbot: Any, tmp_path: Path) -> None:
    source = Path(sample_checkpoint_path())
    before = _tree_hash(source)
    ckpt = open_checkpoint(str(source))
    dialog, runner = _dialog(qtbot, ckpt, Selection(zombies=True, operator_id=0, store_name="default"))
    qtbot.waitUntil(lambda: dialog.plan is not None, timeout=TIMEOUT_MS)
    assert dialog.summary.text().startswith("Would remove 6 rows (736 bytes as stored) from state version 7")
    table = [[dialog.table.item(r, c).text() for c in range(6)] for r in range(dialog.table.rowCount())]
    assert table == [["0", "default", "0", "3", "3", "368"], ["0", "default", "1", "4", "3", "368"]]
    assert '{"key": "leak1"}' in dialog.keys.text()
    assert not dialog.apply_button.isEnabled()  # no folder yet
    target = tmp_path / "pruned"
    dialog.target_edit.setText(str(target))
    assert dialog.apply_button.isEnabled()
    dialog.apply_button.click()
    qtbot.waitUntil(lambda: dialog.plan is not None and dialog.plan.applied, timeout=TIMEOUT_MS)
    assert "Proof: read back, the copy holds 1 row identical" in dialog.result.text()
    assert dialog.plan.proof is not None and dialog.plan.proof.ok
    assert (target / "offsets" / "7").is_file() and (target / "state" / "0" / "0" / "8.delta").is_file()
    assert not dialog.apply_button.isEnabled()  # written once
    assert _tree_hash(source) == before
    dialog.grab().save(str(tmp_path / "prune_dialog.png"))
    dialog.close()
    runner.shutdown()


def test_a_refusal_is_shown_in_words(qtbot: Any, checkpoint: Any) -> None:
    ckpt = open_checkpoint(str(checkpoint("rocks_tws") / "checkpoint"))
    dialog, runner = _dialog(qtbot, ckpt, Selection(zombies=True))
    qtbot.waitUntil(lambda: bool(dialog.result.text()), timeout=TIMEOUT_MS)
    text = dialog.result.text()
    assert text.startswith("Nothing written. operator 0 store") and "virtual column families" in text
    assert dialog.plan is None and not dialog.apply_button.isEnabled()
    dialog.close()
    runner.shutdown()


def test_the_expired_view_opens_the_dialog_on_its_store(qtbot: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """In the app: the expired view's button opens the dialog on the store shown; the copy is written."""
    from tests._gui import open_window

    monkeypatch.setenv("STATELENS_RAISE", "1")
    gen = open_window(qtbot, tmp_path)
    win = next(gen)
    try:
        with qtbot.waitSignal(win.overview_controller.updated, timeout=TIMEOUT_MS):
            win.open_checkpoint(str(sample_checkpoint_path()))
        win.tabs.setCurrentWidget(win.expired)
        qtbot.waitUntil(lambda: win.expired.has_expiry(0, "default"), timeout=TIMEOUT_MS)
        assert win.expired.prune_button.isEnabled()
        win.expired.prune_button.click()
        dialog = win.expired_controller.prune_dialog
        assert dialog is not None and dialog.isVisible()
        qtbot.waitUntil(lambda: dialog.plan is not None, timeout=TIMEOUT_MS)
        assert dialog.plan.removed_rows == 6
        dialog.target_edit.setText(str(tmp_path / "pruned"))
        dialog.apply_button.click()
        qtbot.waitUntil(lambda: dialog.plan.proof is not None, timeout=TIMEOUT_MS)
        assert dialog.plan.proof.ok
        dialog.close()
    finally:
        for _ in gen:
            pass


def test_a_damaged_source_is_refused_then_forced(qtbot: Any, checkpoint: Any, tmp_path: Path) -> None:
    """A copy of a real checkpoint whose metadata file is cut short (statelens doctor: an error in a file
    a restart loads): the dialog says nothing was written, names the file and offers to go on; going on,
    the written copy's result names what it carries instead of saying to restart on it."""
    from tests.test_prune import _damaged_copy

    source, bad = _damaged_copy(checkpoint, "agg_count", tmp_path, "cut:metadata")
    ckpt = open_checkpoint(str(source))
    dialog, runner = _dialog(qtbot, ckpt, Selection(where="key.key = 'a'"))
    qtbot.waitUntil(lambda: bool(dialog.result.text()), timeout=TIMEOUT_MS)
    text = dialog.result.text()
    assert text.startswith("Nothing written. The copy would carry 1 error") and f"\n{bad}: " in text, text
    assert dialog.plan is None and dialog.force_button.isVisible() and not dialog.apply_button.isEnabled()
    assert dialog.summary.text().startswith("Dry run stopped")  # no longer says it is reading

    dialog.force_button.click()
    qtbot.waitUntil(lambda: dialog.plan is not None, timeout=TIMEOUT_MS)
    assert not dialog.force_button.isVisible() and dialog.plan.removed_rows == 1
    assert (
        dialog.result.text().startswith("statelens doctor finds")
        and f"error: {bad}: " in dialog.result.text()
    )
    target = tmp_path / "pruned"
    dialog.target_edit.setText(str(target))
    dialog.apply_button.click()
    qtbot.waitUntil(lambda: dialog.plan is not None and dialog.plan.applied, timeout=TIMEOUT_MS)
    text = dialog.result.text()
    assert dialog.plan.forced and [f.files for f in dialog.plan.carried_errors] == [(bad,)]
    assert "Forced: the copy carries 1 error statelens doctor finds (metadata: " in text, text
    assert "Restart the same query" not in text
    assert (target / bad).read_bytes() == (source / bad).read_bytes()
    dialog.close()
    runner.shutdown()


def test_state_damage_is_refused_without_an_offer(qtbot: Any, checkpoint: Any, tmp_path: Path) -> None:
    """The newest zip cut short: prune reads it itself, so the dialog refuses without offering to go on."""
    from tests.test_prune import _damaged_copy

    source, bad = _damaged_copy(checkpoint, "rocks_agg", tmp_path, "truncate-latest-zip")
    dialog, runner = _dialog(qtbot, open_checkpoint(str(source)), Selection(where="key.key = 'a'"))
    qtbot.waitUntil(lambda: bool(dialog.result.text()), timeout=TIMEOUT_MS)
    text = dialog.result.text()
    assert text.startswith("Nothing written.") and f"\n{bad}: " in text and "cannot carry them" in text, text
    assert not dialog.force_button.isVisible() and dialog.plan is None
    dialog.close()
    runner.shutdown()
