"""A copy of a real checkpoint that grows batch by batch, in the order Spark writes a batch: its offsets
file, then its state files, then its commit (follow mode's tests, and the follow screenshot)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_STATE_FILE = re.compile(r"^\.?(\d+)\.(delta|snapshot|zip|changelog)(\.crc)?$")
_LOG_FILE = re.compile(r"^\.?(\d+)(\.crc)?$")


def _batch_of(rel: Path) -> int | None:
    """The batch that wrote a file of the checkpoint (None: written before the first batch, or shared)."""
    top = rel.parts[0]
    if top in ("offsets", "commits", "sources"):
        m = _LOG_FILE.match(rel.name)
        return int(m.group(1)) if m else None
    if top == "state":
        m = _STATE_FILE.match(rel.name)
        return int(m.group(1)) - 1 if m else None  # version v is written by batch v - 1
    return None


class GrowingCheckpoint:
    """A copy of a real checkpoint, written batch by batch in Spark's order: offsets, state, commit."""

    def __init__(self, source: Path, dest: Path) -> None:
        self.source, self.dest = source, dest
        self.files: dict[int | None, list[Path]] = {}
        for path in sorted(source.rglob("*")):
            if path.is_file():
                rel = path.relative_to(source)
                self.files.setdefault(_batch_of(rel), []).append(rel)
        self.batches = sorted(b for b in self.files if b is not None)
        self.written = -1
        for rel in self.files.get(None, []):
            self._copy(rel)

    def _copy(self, rel: Path) -> None:
        (self.dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.source / rel, self.dest / rel)

    def write_batch(self) -> int:
        """Write the next batch: its offsets, then its state files, then its commit."""
        batch = self.written + 1
        rels = self.files.get(batch, [])
        commits = [r for r in rels if r.parts[0] == "commits"]
        for rel in [r for r in rels if r.parts[0] != "commits"] + commits:
            self._copy(rel)
        self.written = batch
        return batch

    def write_until(self, batch: int) -> None:
        while self.written < batch:
            self.write_batch()

    def committed(self) -> list[int]:
        """Batch ids of the commit files written (Spark's names)."""
        return sorted(int(p.name) for p in (self.dest / "commits").iterdir() if p.name.isdigit())
