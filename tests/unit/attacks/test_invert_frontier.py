"""Fed-AugMix's severity frontier (``fedaug attack invert-frontier``) on hand-written runs and attacks."""

from __future__ import annotations

import json
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.attacks.invert_frontier import Line, read_invert, seed_means
from fedaug.cli.main import main
from fedaug.engine.checkpoint import summarize
from fedaug.errors import ConfigError

PART = "mnist-dirichlet0.5-K4"


def fake_run(root: Path, name: str, method: dict[str, Any], seed: int, acc: float) -> Path:
    """A finished 20-round run dir whose every round tests at ``acc`` (what the frontier reads)."""
    path = root / name / PART / method["name"] / f"seed{seed}"
    path.mkdir(parents=True)
    config = {"name": name, "seed": seed, "method": method, "train": {"rounds": 20}}
    (path / "config.yaml").write_text(json.dumps(config))
    records = [{"round": r, "test/acc": acc} for r in range(1, 21)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in records))
    (path / "summary.json").write_text(json.dumps(summarize(records)))
    return path


def row(
    seed: int, batch: int, stage: str, severity: float, threat: str, ssim: float, **kw: Any
) -> dict[str, Any]:
    """One line of ``fedaug attack invert``'s results.jsonl (the keys the frontier reads)."""
    return {
        "stage": stage,
        "severity": severity,
        "threat": threat,
        "loss_scaling": kw.get("loss_scaling", severity > 0),
        "batch": batch,
        "seed": seed,
        "ssim": ssim,
        "mse": kw.get("mse", 1.0 - ssim),
        "psnr": 10.0,
        "data": "mnist",
        "model": "lenet5",
        "iterations": kw.get("iterations", 1000),
        "batch_size": 4,
        "local_epochs": 5,
        "client_lr": 1e-4,
    }


def write_invert(folder: Path, rows: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    floor = {**rows[0], "label": "flat grey 0.5", "floor": True, "ssim": 0.9}  # never a point
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*rows, floor]))
    return folder


@pytest.fixture
def study(tmp_path: Path) -> dict[str, Any]:
    """FedAvg (71, 73%) and Fed-AugMix severity 3 (70, 74%) on seeds 0-1; invert outputs of seeds 0 and 1,
    seed 0 with two batches (SSIM 0.1 and 0.3 at severity 3: its seed mean 0.2)."""
    runs = tmp_path / "runs"
    for seed, (base, augmix) in enumerate([(0.71, 0.70), (0.73, 0.74)]):
        fake_run(runs, "fedaugmix_mnist", {"name": "fedavg"}, seed, base)
        fake_run(runs, "fedaugmix_sev3", {"name": "fedaugmix", "severity": 3}, seed, augmix)
    seed0 = [
        row(0, 0, "converged", 0, "none", 0.6),
        row(0, 0, "converged", 3, "aware", 0.1),
        row(0, 0, "converged", 3, "ce", 0.05),
        row(0, 1, "converged", 0, "none", 0.8),
        row(0, 1, "converged", 3, "aware", 0.3),
        row(0, 1, "converged", 3, "ce", 0.05),
        row(0, 0, "untrained", 0, "none", 0.9),
        row(0, 0, "untrained", 3, "aware", 0.2),
    ]
    seed1 = [
        row(1, 0, "converged", 0, "none", 0.5),
        row(1, 0, "converged", 3, "aware", 0.4),
        row(1, 0, "converged", 3, "ce", 0.07),
    ]
    invert = [
        write_invert(tmp_path / "inv" / "seed0", seed0),
        write_invert(tmp_path / "inv" / "seed1", seed1),
    ]
    return {"runs": runs, "invert": invert, "tmp": tmp_path}


def _argv(study: dict[str, Any], out: Path, *extra: str) -> list[str]:
    runs = [str(study["runs"] / "fedaugmix_mnist"), str(study["runs"] / "fedaugmix_sev3")]
    invert = [str(p) for p in study["invert"]]
    return ["attack", "invert-frontier", *runs, "--invert", *invert, "--out", str(out), *extra]


def test_cli_writes_the_table_json_and_figure_with_seed_means_of_batch_means(study: dict[str, Any]) -> None:
    out = study["tmp"] / "frontier"
    assert main(_argv(study, out)) == 0
    report = json.loads((out / "severity_frontier.json").read_text())
    assert report["accuracy"]["0"]["mean"] == pytest.approx(72.0)
    assert report["accuracy"]["3"]["mean"] == pytest.approx(72.0)
    assert report["accuracy"]["3"]["std"] == pytest.approx(statistics.stdev([70.0, 74.0]))
    aware = report["attack"]["converged, attacker aware"]
    # seed 0: batches 0.1 and 0.3 -> 0.2; seed 1: 0.4; over seeds 0.3 +- stdev(0.2, 0.4)
    assert aware["3"]["mean"] == pytest.approx(0.3)
    assert aware["3"]["std"] == pytest.approx(statistics.stdev([0.2, 0.4]))
    assert aware["0"]["mean"] == pytest.approx(0.6)  # severity 0 starts the line: (0.7 + 0.5) / 2
    untrained = report["attack"]["untrained, attacker aware"]
    assert (untrained["3"]["mean"], untrained["3"]["n"]) == (pytest.approx(0.2), 1)
    assert list(report["attack"]) == [
        "untrained, attacker aware",
        "converged, attacker aware",
        "converged, attacker ce",
    ]
    table = (out / "severity_frontier.md").read_text()
    assert "| 3 | 2 | 72.00 +- 2.83 | 20.00 (n=1) | 30.00 +- 14.14 (n=2) | 6.00 +- 1.41 (n=2) |" in table
    assert (out / "severity_frontier.png").stat().st_size > 10_000


def test_stages_threat_models_and_metric_select_what_is_drawn(study: dict[str, Any]) -> None:
    out = study["tmp"] / "frontier"
    argv = _argv(study, out, "--stages", "converged", "--threat-models", "ce", "--metric", "mse")
    assert main(argv) == 0
    report = json.loads((out / "severity_frontier.json").read_text())
    (line,) = report["attack"].values()
    assert list(report["attack"]) == ["converged, attacker ce"]
    assert line["3"]["mean"] == pytest.approx(((0.95 + 0.95) / 2 + 0.93) / 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"runs": "nowhere"}, "runs: nowhere does not exist"),
        ({"invert": "{tmp}/runs"}, "no results.jsonl (the --out folder of fedaug attack invert)"),
        ({"stages": "trained"}, "--stages got 'trained'; valid choices: untrained, converged"),
        (
            {"threat_models": "ce", "stages": "untrained"},
            "no attack on a protected client at stages untrained",
        ),
        ({"fedprox": True}, "method fedprox has no AugMix severity; give FedAvg (severity 0) or Fed-AugMix"),
        ({"mixed": True}, "--invert folders mix attack settings"),
        ({"twice": True}, "severity 3: two runs of seed 0 ("),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    study: dict[str, Any], capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    tmp, out = study["tmp"], study["tmp"] / "out"
    runs = [change.get("runs", str(study["runs"]))]
    invert = [change.get("invert", str(study["invert"][0])).format(tmp=tmp)]
    if change.get("fedprox"):
        runs.append(str(fake_run(tmp / "other", "p", {"name": "fedprox"}, 0, 0.7)))
    if change.get("twice"):  # the default preset's Fed-AugMix (severity 3) beside the severity-3 runs
        runs.append(
            str(fake_run(tmp / "other", "fedaugmix_mnist", {"name": "fedaugmix", "severity": 3}, 0, 0.7))
        )
    if change.get("mixed"):
        invert.append(
            str(write_invert(tmp / "inv1500", [row(2, 0, "converged", 3, "aware", 0.1, iterations=1500)]))
        )
    argv = ["attack", "invert-frontier", *runs, "--invert", *invert, "--out", str(out)]
    argv += ["--stages", change.get("stages", "untrained,converged")]
    argv += ["--threat-models", change.get("threat_models", "aware,ce")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1), min_size=1, max_size=3), min_size=1, max_size=4))
def test_seed_value_is_the_mean_of_its_batches(batches: list[list[float]]) -> None:
    rows = [
        row(seed, b, "converged", 3, "aware", v)
        for seed, values in enumerate(batches)
        for b, v in enumerate(values)
    ]
    values = seed_means(rows, "ssim")[(Line("converged", "aware", True), 3.0)]
    assert values == pytest.approx([statistics.fmean(v) for v in batches])


def test_a_one_seed_statistic_is_null_in_strict_json(study: dict[str, Any]) -> None:
    out = study["tmp"] / "frontier"
    assert main(_argv(study, out)) == 0

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    report = json.loads((out / "severity_frontier.json").read_text(), parse_constant=refuse)
    assert report["attack"]["untrained, attacker aware"]["3"] == {
        "mean": pytest.approx(0.2),
        "std": None,
        "n": 1,
    }


ANY_JSON = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3) | st.lists(st.none())


@settings(max_examples=80, deadline=None)
@given(
    key=st.sampled_from(sorted(row(0, 0, "converged", 3, "aware", 0.1))),
    value=ANY_JSON,
    drop=st.booleans(),
)
def test_a_mutated_row_is_read_or_refused_naming_its_line(key: str, value: Any, drop: bool) -> None:
    good = row(0, 0, "converged", 3, "aware", 0.1)
    bad = {k: v for k, v in good.items() if k != key} if drop else {**good, key: value}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "results.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        try:
            rows = read_invert([folder])
        except ConfigError as error:  # the bad line named, or the two lines' settings told apart
            message = str(error)
            assert message.startswith((f"{path} line 2: ", "--invert folders mix attack settings"))
            assert "\n" not in message
        else:  # read: what the frontier uses is usable
            assert len(rows) == 2 and seed_means(rows, "ssim")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1, 2]", "line 1: list is not an attack row"),
        (
            json.dumps({**row(0, 0, "converged", 3, "aware", 0.1), "ssim": "high"}),
            "ssim is 'high', not a number",
        ),
        (json.dumps({**row(0, 0, "converged", 3, "aware", 0.1), "seed": True}), "seed is True, not a int"),
    ],
)
def test_a_line_that_is_no_attack_row_is_refused(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "results.jsonl").write_text(line + "\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_invert([str(tmp_path)])


def test_trade_off_panel_labels_each_lines_ends_and_draws_the_papers_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from fedaug.attacks import invert_frontier
    from fedaug.results.store import Stat

    drawn: list[Any] = []
    monkeypatch.setattr(invert_frontier, "save_figure", lambda figure, stem: drawn.append(figure) or [])
    accuracy = {s: Stat(98.0 - s / 10, 0.1, 2) for s in (0.0, 3.0, 10.0)}
    unprotected = Stat(0.2, 0.01, 2)  # severity 0 is the same point on both lines of a stage
    lines = {
        Line("converged", "aware", True): {
            0.0: unprotected,
            3.0: Stat(0.15, 0.01, 2),
            10.0: Stat(0.1, 0.01, 2),
        },
        Line("converged", "ce", True): {0.0: unprotected, 3.0: Stat(0.25, 0.01, 2), 10.0: Stat(0.3, 0.01, 2)},
    }
    invert_frontier.plot(accuracy, lines, "ssim", tmp_path / "f")
    _, middle, right = drawn[0].axes
    assert sorted(t.get_text() for t in right.texts) == ["s=0", "s=10", "s=10"]
    assert [line.get_xdata()[0] for line in right.lines if line.get_linestyle() == ":"] == [5.0]
    assert [line.get_ydata()[0] for line in middle.lines if line.get_linestyle() == ":"] == [5.0]
