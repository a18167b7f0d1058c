"""Multi-seed attack summaries and the privacy-utility frontier, on small hand-written runs and reports."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.attacks import frontier
from fedaug.attacks.aggregate import ReconRecord, Reports, load_reports, reconstruct_table, run_key
from fedaug.attacks.frontier import Point, exposures, parse_setting, point
from fedaug.cli.main import main
from fedaug.engine.checkpoint import summarize
from fedaug.engine.fairness import fairness_summary
from fedaug.results.store import Stat

PART = "fake-quantity3-K4"


Logged = dict[int, dict[str, float]]


def fake_run(
    root: Path, name: str, method: str, seed: int, last10: float, logged: Logged | None = None
) -> Path:
    """A finished 30-round run dir (config.yaml, metrics.jsonl, summary.json: what the frontier reads) whose
    every round tests at ``last10``, with ``logged[round]`` added to that round's metrics line."""
    path = root / name / PART / method / f"seed{seed}"
    path.mkdir(parents=True)
    config = {"name": name, "seed": seed, "method": {"name": method}, "train": {"rounds": 30}}
    (path / "config.yaml").write_text(json.dumps(config))
    records = [{"round": r, "test/acc": last10, **(logged or {}).get(r, {})} for r in range(1, 31)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in records))
    summary = {**summarize(records), **fairness_summary(records)}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def target(label: str, run_dir: str, round_num: int, shared: str = "features") -> dict[str, Any]:
    return {"label": label, "run_dir": run_dir, "round": round_num, "shared": shared, "description": label}


def write_reconstruct(out: Path, rows: list[tuple[str, str, int, str, str, float]]) -> None:
    """rows: (label, run dir as the attack saw it, round, shared, attacker, mse); mean-image MSE 0.09."""
    out.mkdir(parents=True)
    targets = {label: target(label, run, rnd, shared) for label, run, rnd, shared, _, _ in rows}
    report = {
        "targets": list(targets.values()),
        "rows": [
            {"target": t, "shared": s, "round": r, "attacker": a, "mse": m, "baseline_mse": 0.09}
            for t, _, r, s, a, m in rows
        ],
    }
    (out / "reconstruct.json").write_text(json.dumps(report))


def write_context(
    out: Path, curves: dict[str, tuple[str, int, str, dict[str, list[float]], int | None]]
) -> None:
    """curves: label -> (run dir, round, shared, accuracy per size, samples for 90%)."""
    out.mkdir(parents=True)
    report = {
        "targets": [target(label, run, rnd, shared) for label, (run, rnd, shared, _, _) in curves.items()],
        "accuracy": {label: c[3] for label, c in curves.items()},
        "needed_for_90": {label: c[4] for label, c in curves.items()},
    }
    (out / "context.json").write_text(json.dumps(report))


def test_run_key_matches_a_run_dir_and_its_archived_copy() -> None:
    assert run_key("runs/p/data-K4/flea/seed0") == run_key("studies/x/runs/p/data-K4/flea/seed0")
    assert run_key("runs/p/data-K4/flea/seed0") != run_key("runs/p/data-K4/flea/seed1")


def test_summary_aggregates_seeds_with_the_sample_std(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    attacks = tmp_path / "attacks"
    for seed, (mse, needed) in enumerate([(0.01, 300), (0.02, 1000), (0.03, None)]):
        run = f"runs/p/{PART}/flea/seed{seed}"
        write_reconstruct(attacks / f"seed{seed}" / "rec", [("flea r30", run, 30, "features", "deep", mse)])
        accs = {"100": [0.5, 0.7], "10000": [0.8 + seed / 100, 0.8 + seed / 100]}
        write_context(attacks / f"seed{seed}" / "ctx", {"flea r30": (run, 30, "features", accs, needed)})
    assert main(["attack", "summary", str(attacks), "--out", str(tmp_path / "sum")]) == 0
    assert "6 reports: 3 reconstruction and 3 context records" in capsys.readouterr().out
    text = (tmp_path / "sum" / "summary.md").read_text()
    # MSE 0.01, 0.02, 0.03: mean 0.02, sample std 0.01; ratio to the mean image 0.09
    assert "| flea r30 | 30 | deep | 3 | 0.0200 +- 0.0100 | 0.0900 +- 0.0000 | 0.222 +- 0.111 | - |" in text
    # 300, 1000 and "not reached at 10000" (counted as 10000): a lower bound
    bound = f"{statistics.mean([300, 1000, 10000]):.0f} +- {statistics.stdev([300, 1000, 10000]):.0f}"
    assert f"| 60.0 +- 0.0 | 81.0 +- 1.0 | >= {bound} (300, 1000, > 10000) |" in text
    assert main(["attack", "summary", str(tmp_path / "none"), "--out", str(tmp_path / "s2")]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("attack output " + str(tmp_path / "none") + " does not exist")
    )
    assert not (tmp_path / "s2").exists()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6))
def test_summary_cell_is_mean_and_sample_std(values: list[float]) -> None:
    records = [
        ReconRecord("t", ("a", "b", "c", f"seed{i}"), 30, "features", "deep", v, 0.09, None)
        for i, v in enumerate(values)
    ]
    row = reconstruct_table(records)[2]
    assert f"| {statistics.mean(values):.4f} +- {statistics.stdev(values):.4f} |" in row


@pytest.fixture
def study(tmp_path: Path) -> dict[str, Any]:
    """Archived runs of two FLea settings and FedAvg (2 seeds) and per-seed attack reports that name the runs
    by their original runs/ paths, at rounds 1 and 30, with FedMix / FedData exposure records."""
    archive = tmp_path / "archive"
    accs = {("strong", 0): 0.60, ("strong", 1): 0.64, ("weak", 0): 0.80, ("weak", 1): 0.82}
    for (name, seed), acc in accs.items():
        logged = {r: {"flea/dcor": 0.9 - r / 100 - seed / 10, "flea/exposure": r / 100} for r in (1, 30)}
        fake_run(archive, name, "flea", seed, acc, logged)
    for seed in (0, 1):
        fake_run(archive, "base", "fedavg", seed, 0.70 + seed / 50)
    attacks = tmp_path / "attacks"
    for seed in (0, 1):
        s, w = (f"runs/{n}/{PART}/flea/seed{seed}" for n in ("strong", "weak"))
        write_reconstruct(
            attacks / f"seed{seed}" / "reconstruct",
            [
                ("strong r1", s, 1, "features", "deep", 0.010),
                ("strong r30", s, 30, "features", "deep", 0.050 + seed / 100),
                ("strong r30", s, 30, "features", "conv4", 0.090),
                ("weak r30", w, 30, "features", "deep", 0.010),
                ("FedData", f"runs/b/{PART}/feddata/seed{seed}", 1, "raw", "shared inputs", 0.0),
            ],
        )
        write_context(
            attacks / f"seed{seed}" / "context",
            {
                "strong r30": (s, 30, "features", {"100": [0.6], "1000": [0.95]}, 1000),
                "weak r30": (w, 30, "features", {"100": [0.99], "1000": [1.0]}, 100),
                "FedMix": (f"runs/b/{PART}/fedmix/seed{seed}", 1, "averages", {"100": [0.92]}, 100),
            },
        )
    return {"archive": archive, "attacks": attacks}


def test_points_pair_each_setting_with_the_attacks_on_its_runs(study: dict[str, Any]) -> None:
    reports = load_reports([study["attacks"]])
    label, runs = parse_setting(f"FLea strong={study['archive'] / 'strong'}", "setting")
    latest = point(label, runs, reports, decoder="deep", round_num=None)
    assert latest.accuracy.mean == pytest.approx(62.0) and latest.accuracy.std == pytest.approx(2.0**0.5 * 2)
    assert latest.mse is not None and latest.mse.mean == pytest.approx(0.055) and latest.mse.n == 2
    assert latest.context is not None and latest.context.mean == 1000 and latest.context.std == 0
    assert not latest.context_floor and not latest.context_censored  # 1000 is neither end of 100..1000
    assert latest.rounds == [30]
    # the runs' own logs in the attacked round: dCor 0.6 and 0.5, exposure 0.3
    assert latest.dcor is not None and latest.dcor.mean == pytest.approx(0.55) and latest.dcor.n == 2
    assert latest.exposure is not None and latest.exposure.mean == pytest.approx(0.30)
    early = point(label, runs, reports, decoder="deep", round_num=1)
    assert early.mse is not None and early.mse.mean == pytest.approx(0.010) and early.context is None
    assert early.dcor is not None and early.dcor.mean == pytest.approx(0.84)
    paper = point(label, runs, reports, decoder="conv4", round_num=None)
    assert paper.mse is not None and paper.mse.mean == pytest.approx(0.090)
    lines = exposures(reports)
    assert set(lines["mse"]) == {"FedData: shared inputs", "mean input (nothing recovered)"}
    assert lines["mse"]["FedData: shared inputs"].mean == 0.0 and set(lines["context"]) == {"FedMix"}


def test_a_fedmix_setting_is_plotted_at_its_random_groups_average(tmp_path: Path) -> None:
    # Prepare: one archived FedMix run and its averages' records (random and one-class groups)
    archive, attacks = tmp_path / "archive", tmp_path / "attacks"
    fake_run(archive, "mix", "fedmix", 0, 0.75)
    run = f"runs/mix/{PART}/fedmix/seed0"
    write_reconstruct(
        attacks / "reconstruct",
        [
            ("fedmix eps 2", run, 30, "averages", "average (random groups of 10)", 0.070),
            ("fedmix eps 2", run, 30, "averages", "average (one class groups of 10)", 0.040),
        ],
    )
    # Execute
    label, runs = parse_setting(f"fedmix eps 2={archive / 'mix'}", "setting")
    points = [
        point(label, runs, load_reports([attacks]), decoder=d, round_num=None) for d in ("deep", "conv4")
    ]
    # Assert: one point whatever the decoder, at the random groups' MSE
    for p in points:
        assert p.mse is not None and p.mse.mean == pytest.approx(0.070) and p.mse.n == 1
        assert p.accuracy.mean == pytest.approx(75.0)


def test_each_setting_is_drawn_once_per_panel_and_fedmix_only_as_its_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the DP frontier's shape: FLea and FedMix settings, the FedMix runs' own averages records
    # (random and one-class groups) and context records, an earlier study's FedMix and FedData records
    archive, attacks = tmp_path / "archive", tmp_path / "attacks"
    fake_run(archive, "flea_eps2", "flea", 0, 0.70)
    for eps in ("inf", "2"):
        fake_run(archive, f"mix_eps{eps}", "fedmix", 0, 0.75)
    mix = {eps: f"runs/mix_eps{eps}/{PART}/fedmix/seed0" for eps in ("inf", "2")}
    flea_run, old_mix = f"runs/flea_eps2/{PART}/flea/seed0", f"runs/old/{PART}/fedmix/seed0"
    rows = [("flea eps 2", flea_run, 30, "features", "deep", 0.05)]
    for eps, run in mix.items():
        rows += [
            (f"fedmix eps {eps}", run, 30, "averages", "average (random groups of 10)", 0.07),
            (f"fedmix eps {eps}", run, 30, "averages", "average (one class groups of 10)", 0.04),
        ]
    write_reconstruct(attacks / "dp" / "reconstruct", rows)
    write_reconstruct(
        attacks / "old" / "reconstruct",
        [
            ("FedMix", old_mix, 1, "averages", "average (random groups of 10)", 0.08),
            ("FedData", f"runs/old/{PART}/feddata/seed0", 1, "raw", "shared inputs", 0.0),
        ],
    )
    curves: dict[str, tuple[str, int, str, dict[str, list[float]], int | None]] = {
        f"fedmix eps {eps}": (run, 30, "averages", {"100": [0.95]}, 100) for eps, run in mix.items()
    }
    curves["flea eps 2"] = (flea_run, 30, "features", {"100": [0.6], "300": [0.95]}, 300)
    curves["FedMix"] = (old_mix, 1, "averages", {"100": [0.92]}, 100)
    write_context(attacks / "dp" / "context", curves)
    drawn: list[list[str]] = []
    real_save = frontier.save_figure

    def capture(figure: Any, stem: Path) -> list[Path]:
        drawn.extend(axes.get_legend_handles_labels()[1] for axes in figure.axes)
        return list(real_save(figure, stem))

    monkeypatch.setattr(frontier, "save_figure", capture)
    settings = [f"flea eps 2={archive / 'flea_eps2'}"]
    settings += [f"fedmix eps {eps}={archive / f'mix_eps{eps}'}" for eps in ("inf", "2")]
    # Execute
    argv = ["attack", "frontier", *settings, "--attacks", str(attacks), "--out", str(tmp_path / "f")]
    assert main(argv) == 0
    # Assert: per panel, each setting once (its point) and FedMix nowhere else; FedData stays a line
    report = json.loads((tmp_path / "f" / "frontier.json").read_text())
    assert [p["setting"] for p in report["points"]] == ["flea eps 2", "fedmix eps inf", "fedmix eps 2"]
    assert report["lines"] == {
        "mse": {
            "FedData: shared inputs": {"mean": 0.0, "std": None, "n": 1},
            "mean input (nothing recovered)": {"mean": 0.09, "std": 0.0, "n": 7},
        },
        "context": {},
    }
    assert len(drawn) == 2  # one row: no setting collapsed
    for labels in drawn:
        counts = {name: sum(label.startswith(name) for label in labels) for name in ("flea", "fedmix eps")}
        assert counts == {"flea": 1, "fedmix eps": 2}, labels
        assert not any("FedMix" in label or "average" in label for label in labels), labels


def test_frontier_cli_writes_the_figure_and_the_table(study: dict[str, Any], tmp_path: Path) -> None:
    archive, out = study["archive"], tmp_path / "frontier"
    argv = ["attack", "frontier", f"strong={archive / 'strong'}", f"weak={archive / 'weak'}"]
    options = [
        "--attacks",
        str(study["attacks"]),
        "--reference",
        f"FedAvg={archive / 'base'}",
        "--out",
        str(out),
    ]
    assert main([*argv, *options]) == 0
    report = json.loads((out / "frontier.json").read_text())
    assert [p["setting"] for p in report["points"]] == ["strong", "weak"]
    assert report["references"]["FedAvg"]["mean"] == pytest.approx(71.0)
    assert report["lines"]["context"]["FedMix"]["mean"] == 100
    table = (out / "frontier.md").read_text()
    assert (
        "| weak | 2 | 81.00 +- 1.41 | 2 | 30 | 0.0100 +- 0.0000 | <= 100 +- 0 "
        "| 0.550 +- 0.071 | 0.300 +- 0.000 |" in table
    )
    assert (out / "frontier.png").stat().st_size > 10_000 and not (out / "frontier.pdf").exists()  # PNG only


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"setting": "strong=nowhere"}, "setting 'strong': nowhere does not exist"),
        ({"setting": "strong"}, "setting 'strong' must be LABEL=RUN_DIR[,RUN_DIR...]"),
        ({"attacks": "{tmp}"}, "holds no reconstruct.json or context.json"),
        ({"decoder": "linear"}, "--decoder 'linear': the attack outputs hold conv4, deep"),
        ({"setting": "other={other}"}, "is about these runs (run dirs are matched by their last four parts"),
    ],
)
def test_frontier_bad_input_is_one_line_and_writes_nothing(
    study: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, str],
    message: str,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    other = fake_run(tmp_path, "other", "flea", 0, 0.5)
    setting = change.get("setting", f"strong={study['archive'] / 'strong'}").format(other=other)
    attacks = change.get("attacks", str(study["attacks"])).format(tmp=empty)
    out = tmp_path / "out"
    argv = ["attack", "frontier", setting, "--attacks", attacks, "--out", str(out)]
    assert main([*argv, "--decoder", change.get("decoder", "deep")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()


def test_reports_written_before_round_and_shared_were_recorded_still_load(tmp_path: Path) -> None:
    old = {
        "targets": [
            {
                "label": "FedMix",
                "run_dir": "runs/b/x/fedmix/seed0",
                "description": "FedMix: fedmix round 1, averages of 10 inputs",
            }
        ],
        "accuracy": {"FedMix": {"100": [0.9, 1.0]}},
        "needed_for_90": {"FedMix": 100},
    }
    (tmp_path / "context.json").write_text(json.dumps(old))
    (record,) = load_reports([tmp_path]).context
    assert (record.round, record.shared, record.accuracy) == (1, "averages", {100: pytest.approx(0.95)})
    assert Reports([], [record]).context[0].bound == 100


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` (what jq or a browser would refuse)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_one_seed_point_has_a_null_std_in_strict_json(study: dict[str, Any], tmp_path: Path) -> None:
    archive, out = study["archive"], tmp_path / "frontier"
    one = archive / "strong" / PART / "flea" / "seed0"
    argv = ["attack", "frontier", f"strong={one}", "--attacks", str(study["attacks"]), "--out", str(out)]
    assert main(argv) == 0
    point = strict_json((out / "frontier.json").read_text())["points"][0]
    assert point["accuracy"] == {"mean": pytest.approx(60.0), "std": None, "n": 1}
    assert point["mse"] == {"mean": pytest.approx(0.05), "std": None, "n": 1}
    assert "| strong | 1 | 60.00 | 1 | 30 | 0.0500 | 1000 |" in (out / "frontier.md").read_text()


def test_attack_summary_json_is_strict(study: dict[str, Any], tmp_path: Path) -> None:
    assert main(["attack", "summary", str(study["attacks"]), "--out", str(tmp_path / "s")]) == 0
    data = strict_json((tmp_path / "s" / "summary.json").read_text())
    assert len(data["reconstruct"]) == 10 and len(data["context"]) == 6


def _point(setting: str, accuracy: float, mse: float) -> Point:
    return Point(setting, Stat(accuracy, 1.0, 3), Stat(mse, 0.001, 3), None, False, [30])


def test_the_zoomed_row_leaves_out_only_settings_far_below_the_best() -> None:
    points = [_point("a", 84.0, 0.010), _point("b", 80.5, 0.014), _point("collapsed", 26.5, 0.115)]
    assert [p.setting for p in frontier._close(points)] == ["a", "b"]
    assert frontier._close(points[:2]) == points[:2]  # nothing far: no zoom row (plot() draws one row)
    low, high = frontier._limits([p.mse for p in points[:2] if p.mse is not None], 0.0)
    assert (low, high) == pytest.approx((0.009, 0.015))  # every point with its error bar, collapsed one out


def test_the_frontier_figure_has_a_zoom_row_when_a_setting_collapsed(tmp_path: Path) -> None:
    points = [_point("a", 84.0, 0.010), _point("b", 80.5, 0.014), _point("collapsed", 26.5, 0.115)]
    lines: dict[str, dict[str, Stat]] = {"mse": {}, "context": {}}
    for shown, rows in ((points, 2), (points[:2], 1)):
        frontier.plot(shown, {}, lines, tmp_path / f"f{rows}", decoder="deep")
        width, height = _png_size(tmp_path / f"f{rows}.png")
        assert height / width == pytest.approx(4.6 * rows / 11.0, rel=0.02)


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[16:24]
    return int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 100, allow_nan=False),
    st.floats(0, 20, allow_nan=False),
    st.sampled_from([5.0, 10.0]),
)
def test_accuracy_axis_shows_its_points_spans_enough_and_stops_at_100(
    low: float, width: float, span: float
) -> None:
    high = low + width  # may pass 100: an error bar above the top
    lo, hi = frontier.accuracy_limits(low, high, span)
    assert lo <= low and hi >= high  # every point and error bar stays in view
    assert hi - lo >= min(span, high - low) - 1e-9 and hi - lo >= span - 1e-9
    assert hi <= max(100.0, high) + 1e-9  # never above 100% unless the data is
    if high - low >= span:
        assert (lo, hi) == (low, high)


def test_accuracy_axis_of_close_points_near_100_ends_at_100() -> None:
    assert frontier.accuracy_limits(97.4, 98.6, 10.0) == (90.0, 100.0)
    assert frontier.accuracy_limits(60.0, 62.0, 10.0) == (56.0, 66.0)
