"""Attack reports read back (``fedaug attack summary`` / ``frontier``): whatever a ``reconstruct.json`` or
``context.json`` holds, reading it either gives records or one ConfigError naming the file, never a traceback
(hypothesis mutates valid reports: a key dropped, a value replaced by any JSON value)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaug.attacks.aggregate import load_reports
from fedaug.cli.main import main
from fedaug.errors import ConfigError
from tests.helpers import mutated, tree_paths

TARGETS = [
    {"label": "flea r1", "run_dir": "runs/a/x-K4/flea/seed0", "round": 1, "shared": "features"},
    {"label": "FedMix r1", "run_dir": "runs/a/x-K4/fedmix/seed0", "round": 1, "shared": "averages"},
]
RECONSTRUCT = {
    "targets": [{**TARGETS[0], "eval_dcor": 0.5}, TARGETS[1]],
    "rows": [
        {"target": "flea r1", "shared": "features", "round": 1, "attacker": "deep", "mse": 0.02,
         "baseline_mse": 0.09},
        {"target": "FedMix r1", "shared": "averages", "round": 1, "attacker": "averages", "mse": 0.08,
         "baseline_mse": 0.09},
    ],
}  # fmt: skip
CONTEXT = {
    "targets": TARGETS,
    "accuracy": {"flea r1": {"100": [0.8, 1.0], "300": [1.0]}, "FedMix r1": {"100": [0.95]}},
    "needed_for_90": {"flea r1": 300, "FedMix r1": None},
}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def test_the_valid_reports_load(tmp_path: Path) -> None:
    (tmp_path / "reconstruct.json").write_text(json.dumps(RECONSTRUCT))
    (tmp_path / "context.json").write_text(json.dumps(CONTEXT))
    reports = load_reports([tmp_path])
    assert [(r.label, r.mse, r.eval_dcor) for r in reports.reconstruct] == [
        ("flea r1", 0.02, 0.5),
        ("FedMix r1", 0.08, None),
    ]
    assert [(r.label, r.accuracy, r.needed) for r in reports.context] == [
        ("flea r1", {100: 0.9, 300: 1.0}, 300),
        ("FedMix r1", {100: 0.95}, None),
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), name=st.sampled_from(["reconstruct.json", "context.json"]), drop=st.booleans())
def test_a_mutated_report_loads_or_is_refused_naming_the_file(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, name: str, drop: bool
) -> None:
    valid = RECONSTRUCT if name == "reconstruct.json" else CONTEXT
    path = data.draw(st.sampled_from(tree_paths(valid)), label="path")
    changed = mutated(valid, path, None if drop else data.draw(JSON, label="value"), drop)
    folder = tmp_path_factory.mktemp("report")
    (folder / name).write_text(json.dumps(changed))
    try:
        load_reports([folder])
    except ConfigError as error:
        assert str(error).startswith(f"{folder / name} is ")
        assert "\n" not in str(error)


@pytest.mark.parametrize(
    ("name", "report", "reason"),
    [
        (
            "reconstruct.json",
            {"targets": [], "rows": [{"target": "x"}]},
            "target 'x' has no entry in 'targets'",
        ),
        ("reconstruct.json", mutated(RECONSTRUCT, ("rows", 0, "round"), "a", False), "'a' is not an integer"),
        (
            "reconstruct.json",
            mutated(RECONSTRUCT, ("rows", 1, "mse"), float("nan"), False),
            "nan is not a finite",
        ),
        ("context.json", mutated(CONTEXT, ("accuracy",), None, True), "no 'accuracy'"),
        (
            "context.json",
            mutated(CONTEXT, ("accuracy", "flea r1", "300"), [], False),
            "target 'flea r1' has no accuracies at size 300",
        ),
    ],
)
def test_summary_refuses_a_malformed_report_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, report: Any, reason: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / name).write_text(json.dumps(report))
    assert main(["attack", "summary", str(tmp_path / "a"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedaug: error: {tmp_path / 'a' / name} is a malformed attack report ({reason}")
    assert not (tmp_path / "out").exists()
