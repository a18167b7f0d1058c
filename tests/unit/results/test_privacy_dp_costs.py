"""``tools/results/privacy_dp.py``: the DP study's "How long" blocks from a ``step_costs.json`` with known
numbers (a measured kind's range, an assumed kind, a missing kind, the projection's line)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.results import privacy_dp
from tools.results.common import Archive

COSTS = {
    "measured_from": "2026-12-02",
    "measured_to": "2026-12-03",
    "machine": "a laptop",
    "assumed_s": {"har:flea l1:run": 2400.0},
    "steps_done": 3,
    "steps_left": 5,
    "measured": [
        *(
            {"dataset": "fmnist", "method": "flea l1", "kind": kind, "steps": 3, "seconds": seconds}
            | {"min_s": low, "median_s": low, "max_s": high, "startup_median_s": startup}
            for kind, seconds, low, high, startup in (
                ("run", "CPU", 246.6, 315.4, 4.0),
                ("reconstruct", "wall", 51.0, 51.2, 13.0),
            )
        ),
    ],
    "left": [],
    "core_hours": {
        "done": 0.25,
        "left": 2.0,
        "left_by_dataset": {"fmnist": 0.5, "har": 1.5},
        "left_by_kind": {"run": 1.5, "reconstruct": 0.5},
    },
}


@pytest.fixture
def costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    data = copy.deepcopy(COSTS)
    path = tmp_path / "step_costs.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(privacy_dp, "COSTS", path)
    privacy_dp.costs.cache_clear()
    yield data
    privacy_dp.costs.cache_clear()


def test_the_table_gives_a_measured_range_an_assumed_value_and_a_dash(
    costs: dict[str, Any], tmp_path: Path
) -> None:
    rows = privacy_dp.privacy_dp_step_costs(Archive(tmp_path)).splitlines()
    assert "finished steps of 2026-12-02 to 2026-12-03, a laptop" in rows[0]
    assert "| FLea run, split layer 1 | 247-315 CPU s (n = 3) | 2,400 s, assumed |" in rows
    assert "| reconstruct, FLea layer 1 (conv4 + deep decoders) | 51 wall s (n = 3) | - |" in rows
    assert "| FedMix run (no split layer) | - | - |" in rows
    assert rows[-1] == "| start-up of a step | 4-13 wall s (medians) | - |"


def test_the_projection_line_adds_up_the_hours_left(costs: dict[str, Any], tmp_path: Path) -> None:
    assert privacy_dp.privacy_dp_left(Archive(tmp_path)) == (
        "With 3 of 8 steps done (0.2 core-hours as measured), the 5 left cost about 2.0 core-hours at the "
        "medians and the assumed seconds: Fashion-MNIST 0.5, UCI-HAR 1.5; training is 75% of it.\n"
    )
    costs["core_hours"]["left"] = None
    privacy_dp.costs.cache_clear()
    privacy_dp.COSTS.write_text(json.dumps(costs))
    assert privacy_dp.privacy_dp_left(Archive(tmp_path)).startswith(
        "5 steps left; a kind left has no seconds"
    )
