"""The CI mutation run's bookkeeping (``tests/mutation.py``): which modules it mutates, how it samples, and
the scores it keeps in ``tests/mutation_scores.json`` and docs/testing.md.

The run itself is the last step of ``scripts/test.sh`` (it tests a few hundred mutants, each with the
module's tests): these tests only check that no ``readers/`` module escapes it, that the sample is fixed,
and that what is committed is what a run reports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests import mutation

REPO = Path(__file__).resolve().parent.parent


def test_every_readers_module_is_mutated_or_said_why_not() -> None:
    files = {p.relative_to(REPO / "readers").as_posix() for p in (REPO / "readers").rglob("*.py")}
    mutated = [f for target in mutation.MODULES.values() for f in target.files]
    assert len(mutated) == len(set(mutated)), "a module is in two work folders"
    assert set(mutated).isdisjoint(mutation.NOT_DECODERS)
    assert set(mutated) | set(mutation.NOT_DECODERS) == files


def test_the_sample_is_seeded_and_a_mutant_is_in_it_by_its_own_name() -> None:
    names = [f"statelens.readers.logs.x_f{i}__mutmut_{j}" for i in range(7) for j in range(1, 40)]
    picked = mutation.stable_sample(names, 30, 0)
    assert picked == mutation.stable_sample(list(reversed(names)), 30, 0)
    assert len(picked) == 30
    assert picked != mutation.stable_sample(names, 30, 1)
    # mutants added elsewhere can push members out, never pull others in
    more = names + [f"statelens.readers.logs.x_g__mutmut_{j}" for j in range(1, 60)]
    assert set(mutation.stable_sample(more, 30, 0)) & set(names) <= set(picked)
    # a function whose mutants are gone (or renamed) leaves the other functions' members in the sample
    rest = [n for n in names if "x_f3__" not in n]
    assert {n for n in picked if "x_f3__" not in n} <= set(mutation.stable_sample(rest, 30, 0))


def test_mutants_are_told_apart_by_module() -> None:
    assert mutation.module_of("statelens.readers._format.records.x_slices__mutmut_18") == "_format/records.py"
    assert mutation.module_of("statelens.readers._format.store_base.xǁStoreReaderBaseǁf__mutmut_8") == (
        "_format/store_base.py"
    )
    assert mutation.module_of("statelens.readers.logs.x_parse__mutmut_1") == "logs.py"


def _scores() -> dict[str, dict[str, Any]]:
    return dict(json.loads(mutation.SCORES.read_text())["modules"])


def test_the_committed_scores_cover_every_decoder_module_at_the_floor_or_listed_under_it() -> None:
    scores = _scores()
    decoders = {f"readers/{f}" for target in mutation.MODULES.values() for f in target.files}
    assert set(scores) == decoders
    for module, entry in scores.items():
        sample, equivalent, survived = entry["sample"], entry["equivalent"], entry["survived"]
        assert len(sample) == min(mutation.CI_SAMPLE, entry["mutants"]), module
        assert not entry["untested"], module
        assert set(equivalent) <= set(mutation.EQUIVALENT), module
        killed = len(sample) - len(equivalent) - len(survived)
        assert entry["killed"] == killed, module
        assert entry["score"] == round(100.0 * killed / (len(sample) - len(equivalent)), 1), module
        # at the floor, or under it and listed with what its tests lack (a ratchet: tests/mutation.py)
        assert (entry["score"] >= mutation.FLOOR) != (module in mutation.BELOW_FLOOR), module


def test_docs_show_the_committed_scores() -> None:
    text = (REPO / "docs" / "testing.md").read_text()
    row = (
        r"^\| `(readers/[\w/]+\.py)` \| ([\d,]+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| \*\*([\d.]+)%\*\* \|$"
    )
    shown = {
        r[0]: (int(r[1].replace(",", "")), int(r[2]), int(r[3]), int(r[4]), int(r[5]), float(r[6]))
        for r in re.findall(row, text, re.M)
    }
    expected = {
        module: (
            e["mutants"],
            len(e["sample"]),
            e["killed"],
            len(e["survived"]),
            len(e["equivalent"]),
            e["score"],
        )
        for module, e in _scores().items()
    }
    assert shown == expected
