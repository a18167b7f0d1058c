"""Statistics that apply (issue 57): short runs show the rounds they average, one seed shows no std, counts
are singular where they are one; titles name the setting in the papers' notation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fedaug.config.load import load_run_config
from fedaug.results.report import write_report
from fedaug.results.store import config_setting_label
from fedaug.runs.runner import comparison_table


def _summary(rounds: int) -> dict[str, float | int]:
    return {"rounds": rounds, "best_acc": 0.5, "best_round": 1, "last10_acc": 0.4, "final_acc": 0.3}


def test_the_run_table_names_the_rounds_its_mean_covers() -> None:
    three = comparison_table([("fedavg", _summary(3)), ("flea", _summary(3)), ("ccvr", {"rounds": 3})])
    assert three.splitlines() == [
        "method             best %  round   last-3 %  final %",
        "fedavg              50.00      1      40.00    30.00",
        "flea                50.00      1      40.00    30.00",
        "ccvr                                 (no evaluation)",
    ]
    assert comparison_table([("fedavg", _summary(100))]).splitlines()[0].endswith("last-10 %  final %")
    one = comparison_table([("fedavg", _summary(1))]).splitlines()
    assert one == ["method             best %  round  final %", "fedavg              50.00      1    30.00"]


def test_a_report_of_one_short_run_says_one_of_each_and_no_std(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    make_run(tmp_path, accs=[0.5, 0.6, 0.7])
    printed = write_report([tmp_path], formats=["md"]).printed[0]
    lines = printed.splitlines()
    assert lines[0].startswith(f"# 1 runs from `{tmp_path}`: 1 method x 1 setting, rounds 3;")
    assert "**Best test accuracy (%)**, one seed (n = 1)" in lines
    assert "**Mean test accuracy of the last 3 rounds (%)**, one seed (n = 1)" in lines
    assert "| fedavg | **60.00 (n=1)** |" in lines  # the mean of its 3 rounds, no ±
    assert "±" not in printed


def test_a_report_of_several_seeds_and_lengths_keeps_the_std_and_says_so(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    make_run(tmp_path, seed=0, accs=[0.5, 0.6])
    make_run(tmp_path, seed=1, accs=[0.5, 0.7])
    make_run(tmp_path, method="flea", seed=0, accs=[0.5] * 12)
    printed = write_report([tmp_path], formats=["md"]).printed[0]
    assert ": 2 methods x 1 setting, rounds 2, 12;" in printed.splitlines()[0]
    assert "**Mean test accuracy of the last 2-10 rounds (%)**, mean ± std over seeds (n = seeds)" in printed
    assert "| fedavg | **57.50 ± 3.54 (n=2)** |" in printed  # (55 + 60) / 2 over seeds, sample std


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        ([], "uci_har Qua(2) K=75"),
        (["partition=dirichlet", "partition.alpha=0.1"], "uci_har Dir(0.1) K=75"),
        (["partition.num_clients=150"], "uci_har Qua(2) K=150"),
    ],
)
def test_a_configs_setting_label_is_its_report_column(overrides: list[str], label: str) -> None:
    assert config_setting_label(load_run_config(["default"], overrides)) == label
