"""The DP frontier's verdict (:mod:`tools.results.privacy_dp_verdict`): a FLea setting is recommended only
when it is both more accurate than FedAvg (paired by seed) and more private than FedMix at its epsilon."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from tools.results import privacy_dp_verdict as module
from tools.results.common import Archive

MakeRun = Callable[..., Path]
DATASET = module.Dataset("fmnist", "Fashion-MNIST", "uci_har-qua2-K75", "fedavg_study/runs")
SEEDS = (0, 1, 2)


def _run(make_run: MakeRun, root: Path, method: str, seed: int, acc: float) -> Path:
    """A run dir laid out as the study's: ``<name>/<data-partition>/<method>/seed<N>``."""
    made = make_run(root / "made", method=method, seed=seed, accs=[acc] * 3)
    run = root / made.parts[-4] / method / f"seed{seed}"
    run.parent.mkdir(parents=True, exist_ok=True)
    return made.rename(run)


def _attacks(folder: Path, runs: dict[int, Path], mse: dict[str, float], needed: int, shared: str) -> None:
    """A reconstruct.json (one row per attacker and ``mse``) and a context.json per seed's run."""
    for seed, run in runs.items():
        label = f"{run.parts[-4]} seed {seed}"  # the setting's name
        target = {"label": label, "run_dir": str(run), "round": 3, "shared": shared}
        rows = [
            {
                "target": label,
                "round": 3,
                "shared": shared,
                "attacker": name,
                "mse": value,
                "baseline_mse": 0.1,
            }
            for name, value in mse.items()
        ]
        out = folder / run.parts[-4] / f"seed{seed}"
        (out / "reconstruct").mkdir(parents=True)
        (out / "reconstruct" / "reconstruct.json").write_text(json.dumps({"targets": [target], "rows": rows}))
        (out / "context").mkdir(parents=True)
        curve = {label: {"100": [0.5], str(needed): [0.95]}}
        context = {"targets": [target], "accuracy": curve, "needed_for_90": {label: needed}}
        (out / "context" / "context.json").write_text(json.dumps(context))


def _setting(
    make_run: MakeRun, studies: Path, name: str, accs: dict[int, float], mse: dict[str, float], needed: int
) -> None:
    method = "fedmix" if "_l" not in name else "flea"
    root = studies / "privacy_dp" / "runs" / name
    runs = {seed: _run(make_run, root, method, seed, acc) for seed, acc in accs.items()}
    shared = "averages" if method == "fedmix" else "features"
    _attacks(studies / "privacy_dp" / "attacks" / "fmnist", runs, mse, needed, shared)


@pytest.fixture
def studies(tmp_path: Path, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch) -> Path:
    """FedAvg at 0.60 on seeds 0-2; FedMix at epsilon 8 and 4 reconstructed to MSE 0.030, found from 300
    samples; three FLea settings (below)."""
    monkeypatch.setattr(module, "DATASETS", (DATASET,))
    for seed in SEEDS:
        _run(make_run, tmp_path / "fedavg_study" / "runs", "fedavg", seed, 0.60)
    guess = {"average (random groups of 10)": 0.030}
    for eps in ("8", "4"):
        _setting(make_run, tmp_path, f"privacy_dp_fmnist_eps{eps}", dict.fromkeys(SEEDS, 0.55), guess, 300)
    # layer 1, epsilon 8: 2-3 points above FedAvg, its best decoder 0.010 above FedMix's guess: a candidate
    gains = {0: 0.62, 1: 0.63, 2: 0.625}
    _setting(make_run, tmp_path, "privacy_dp_fmnist_l1_eps8", gains, {"conv4": 0.045, "deep": 0.040}, 1000)
    # layer 2, epsilon 8: more accurate still, but its best decoder beats FedMix's guess: not private
    more = {0: 0.66, 1: 0.67, 2: 0.665}
    _setting(make_run, tmp_path, "privacy_dp_fmnist_l2_eps8", more, {"conv4": 0.050, "deep": 0.020}, 1000)
    # layer 1, epsilon 4: more private, less accurate than FedAvg
    less = {0: 0.50, 1: 0.52, 2: 0.51}
    _setting(make_run, tmp_path, "privacy_dp_fmnist_l1_eps4", less, {"conv4": 0.060, "deep": 0.055}, 3000)
    return tmp_path


def test_the_recommendation_is_a_setting_both_more_accurate_and_more_private(studies: Path) -> None:
    rows = {row.setting: row for row in module.rows(studies, DATASET)}
    assert list(rows) == ["FLea layer 1, epsilon 8", "FLea layer 1, epsilon 4", "FLea layer 2, epsilon 8"]
    claims = {name: (row.accurate, row.private, row.candidate) for name, row in rows.items()}
    assert claims == {
        "FLea layer 1, epsilon 8": (True, True, True),
        "FLea layer 1, epsilon 4": (False, True, False),
        "FLea layer 2, epsilon 8": (True, False, False),
    }
    first = rows["FLea layer 1, epsilon 8"]
    assert first.accuracy is not None and first.accuracy.stat.mean == pytest.approx(2.5)
    assert first.mse is not None and first.mse.stat.mean == pytest.approx(0.010)
    assert first.context == (1000.0, 300.0)
    text = module.verdict(studies)
    assert "**Recommended (`flea_private`): FLea layer 1, epsilon 8**" in text
    assert "| FLea layer 1, epsilon 8 | +2.50 ± 0.50 (3 seeds) | yes | +0.0100 ± 0.0000 (3 seeds) |" in text


def test_one_seed_makes_no_claim_and_no_candidate_says_so(studies: Path) -> None:
    # Act: keep seed 0 of every FLea setting alone
    for run in (studies / "privacy_dp" / "runs").glob("privacy_dp_fmnist_l*/**/seed[12]"):
        for file in run.iterdir():
            file.unlink()
        run.rmdir()
    rows = module.rows(studies, DATASET)
    # Assert
    assert all(row.accurate is None and row.private is None and not row.candidate for row in rows)
    text = module.verdict(studies)
    assert "| FLea layer 1, epsilon 8 | +2.00 (1 seed) | - |" in text
    assert "**Not decided yet**: 0 of the 10 Fashion-MNIST settings have the seeds" in text


def test_nothing_archived_yet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "DATASETS", (DATASET,))
    assert module.verdict(tmp_path).startswith("Fashion-MNIST: no archived run yet.")


def test_none_once_every_setting_is_decided_and_none_qualifies(
    studies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "LAYERS", (1,))
    monkeypatch.setattr(module, "EPSILONS", ("4",))  # the one setting: more private, less accurate
    assert "**None**: none of the 1 Fashion-MNIST settings" in module.verdict(studies)


def test_a_context_attack_that_never_reached_90_percent_is_shown_as_a_bound(studies: Path) -> None:
    for path in (studies / "privacy_dp" / "attacks").glob(
        "fmnist/privacy_dp_fmnist_l1_eps4/*/context/context.json"
    ):
        report = json.loads(path.read_text())
        label = report["targets"][0]["label"]
        report["accuracy"] = {label: {"100": [0.5], "3000": [0.7]}}
        report["needed_for_90"] = {label: None}
        path.write_text(json.dumps(report))
    row = next(r for r in module.rows(studies, DATASET) if r.setting == "FLea layer 1, epsilon 4")
    assert row.context == (3000.0, 300.0) and row.censored == (True, False)
    assert "| ≥3000 vs 300 |" in module.verdict(studies)


def test_the_readme_row_names_the_recommendation_or_says_there_is_none(
    studies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools.results.readme import privacy_dp_rows

    archive = cast(Archive, SimpleNamespace(root=studies))
    [[_, _, ours, _]] = privacy_dp_rows(archive)
    # no epsilon-inf setting in the fixture: the most accurate DP setting, then the recommendation
    assert ours == (
        "most accurate with DP: FLea layer 2, epsilon 8: +6.50 ± 0.50 last-10, MSE -0.0100 ± 0.0000 vs "
        "FedMix's (n = 3); recommended (`flea_private`): FLea layer 1, epsilon 8"
    )
    monkeypatch.setattr(module, "LAYERS", (1,))
    monkeypatch.setattr(module, "EPSILONS", ("4",))  # as the verdict's "None" test: one decided setting
    [[_, _, ours, _]] = privacy_dp_rows(archive)
    assert ours.endswith(
        "none both more accurate than FedAvg and more private than FedMix: no `flea_private`"
    )
