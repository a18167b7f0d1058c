"""Markdown, LaTeX and CSV tables: bold best per column, the papers' arrows, published numbers beside ours."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from fedaug.results.reference import load_reference
from fedaug.results.report import build_tables, render, write_report
from fedaug.results.store import Grouping, group_runs, load_runs
from fedaug.results.tables import Improvement, to_csv, to_latex, to_markdown
from tests.conftest import REPO_ROOT

# best accuracy per (method, partition); fedavg has two seeds on qua2 (0.59 and 0.61)
BEST = {
    "qua2": {"fedavg": [0.59, 0.61], "fedlc": [0.65], "feddata": [0.80], "flea": [0.72]},
    "dir0.3": {"fedavg": [0.60], "fedlc": [0.66], "feddata": [0.70], "flea": [0.70]},
    "dir0.1": {"fedavg": [0.50], "fedlc": [0.52], "flea": [0.53]},
}


@pytest.fixture
def grouping(tmp_path: Path, make_run: Callable[..., Path]) -> Grouping:
    for partition, methods in BEST.items():
        for method, values in methods.items():
            for seed, value in enumerate(values):
                make_run(tmp_path, method=method, partition=partition, seed=seed, accs=[value])
    return group_runs(load_runs(tmp_path))


def _line(markdown: str, first_cell: str) -> str:
    return next(line for line in markdown.splitlines() if line.startswith(f"| {first_cell} |"))


def test_markdown_bold_best_and_arrows(grouping: Grouping) -> None:
    best, _ = build_tables(grouping, highlight="flea")
    text = to_markdown(best)
    assert _line(text, "method") == (
        "| method | uci_har Qua(2) K=75 | uci_har Dir(0.3) K=75 | uci_har Dir(0.1) K=75 |"
    )
    assert _line(text, "fedavg") == "| fedavg | 60.00 ± 1.41 (n=2) | 60.00 (n=1) | 50.00 (n=1) |"
    assert _line(text, "feddata") == "| feddata | **80.00 (n=1)** | **70.00 (n=1)** | – |"
    # (72 - 65) / 65 = +10.8 % (feddata excluded, as in the papers): two arrows; (70 - 66) / 66 = +6.1 %: one
    assert _line(text, "flea") == "| flea | 72.00 (n=1) ↑↑ | **70.00 (n=1)** ↑ | **53.00 (n=1)** |"
    assert _line(text, "flea vs best other") == (
        "| flea vs best other | +10.8% vs fedlc | +6.1% vs fedlc | +1.9% vs fedlc |"
    )


def test_the_reference_runs_frame_the_table_and_are_not_the_best_other(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: the floor (local) and the ceiling (centralized) beside FedAvg and FLea
    for method, value in {"centralized": 0.90, "flea": 0.70, "fedavg": 0.60, "local": 0.30}.items():
        make_run(tmp_path, method=method, partition="qua2", seed=0, accs=[value])
    # Execute
    grouping = group_runs(load_runs(tmp_path))
    best, _ = build_tables(grouping, highlight="flea")
    # Assert: local first, centralized last; FLea is compared with FedAvg, (70 - 60) / 60 = +16.7 %
    assert grouping.rows == ["local", "fedavg", "flea", "centralized"]
    found = best.improvements["uci_har Qua(2) K=75"]
    assert found.other == "fedavg" and found.percent == pytest.approx(100 * 10 / 60)


def test_unpaired_improvement_is_marked(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    """A mean over seeds 0-2 against a best other over seed 0 alone is flagged, with both counts."""
    for seed, value in enumerate([0.70, 0.72, 0.74]):
        make_run(tmp_path, method="flea", partition="qua2", seed=seed, accs=[value])
    make_run(tmp_path, method="fedlc", partition="qua2", seed=0, accs=[0.60])
    make_run(tmp_path, method="fedavg", partition="dir0.1", seed=0, accs=[0.50])
    make_run(tmp_path, method="flea", partition="dir0.1", seed=0, accs=[0.55])
    best, _ = build_tables(group_runs(load_runs(tmp_path)), highlight="flea")
    text = to_markdown(best)
    # (72 - 60) / 60 = +20 %, n 3 against 1; Dir(0.1): seed 0 against seed 0, paired, no mark
    assert _line(text, "flea vs best other") == (
        "| flea vs best other | +20.0% vs fedlc § (n 3 vs 1) | +10.0% vs fedavg |"
    )
    assert text.rstrip().endswith("(n: highlighted vs other), so they are not paired.")
    assert r"\S{} (n 3 vs 1)" in to_latex(best)


def test_rows_follow_the_papers_order(grouping: Grouping) -> None:
    assert grouping.rows == ["fedavg", "fedlc", "feddata", "flea"]


def test_improvement_arrows_thresholds() -> None:
    assert Improvement(10.01, "x").arrows == "↑↑"
    assert Improvement(7.0, "x").arrows == "↑"
    assert Improvement(5.0, "x").arrows == ""
    assert Improvement(-12.0, "x").arrows == ""


def test_without_exclusion_feddata_is_the_best_other(grouping: Grouping) -> None:
    best, _ = build_tables(grouping, highlight="flea", exclude=())
    assert best.improvements["uci_har Qua(2) K=75"] == Improvement(pytest.approx(-10.0), "feddata")
    assert "↑" not in _line(to_markdown(best), "flea").split("|")[2]


def test_last10_table_uses_last10_acc(grouping: Grouping) -> None:
    _, last10 = build_tables(grouping)
    assert last10.metric == "last10_acc"
    assert last10.stats[("fedavg", "uci_har Qua(2) K=75")].mean == pytest.approx(60.0)
    assert last10.highlight is None and "vs best other" not in to_markdown(last10)


def test_latex(grouping: Grouping) -> None:
    best, _ = build_tables(grouping, highlight="flea")
    text = to_latex(best)
    assert text.splitlines()[1] == "\\begin{tabular}{lrrr}"
    assert "method & uci\\_har Qua(2) K=75 & uci\\_har Dir(0.3) K=75 & uci\\_har Dir(0.1) K=75 \\\\" in text
    assert "fedavg & 60.00 $\\pm$ 1.41 ($n$=2) & 60.00 ($n$=1) & 50.00 ($n$=1) \\\\" in text
    assert "flea & 72.00 ($n$=1) $\\uparrow\\uparrow$ & \\textbf{70.00 ($n$=1)} $\\uparrow$" in text
    assert "feddata & \\textbf{80.00 ($n$=1)} & \\textbf{70.00 ($n$=1)} & -- \\\\" in text
    assert "+10.8\\% vs fedlc" in text
    assert text.rstrip().endswith("\\end{tabular}")


def test_csv_long_format(grouping: Grouping) -> None:
    rows = list(csv.DictReader(io.StringIO(to_csv(build_tables(grouping, highlight="flea")))))
    assert len(rows) == 2 * 11  # two metrics x 11 filled cells
    flea = next(
        r for r in rows if r["metric"] == "best_acc" and r["method"] == "flea" and "Qua" in r["setting"]
    )
    assert flea["mean"] == "72.0000" and flea["n"] == "1" and flea["is_best"] == "0"
    assert (flea["rel_improvement_pct"], flea["vs"]) == ("10.77", "fedlc")
    fedavg = next(
        r for r in rows if r["metric"] == "best_acc" and r["method"] == "fedavg" and "Qua" in r["setting"]
    )
    assert (fedavg["mean"], fedavg["std"], fedavg["n"]) == ("60.0000", "1.4142", "2")


def test_reference_column_from_a_file(tmp_path: Path, grouping: Grouping) -> None:
    path = tmp_path / "ref.yaml"
    path.write_text(
        "tables:\n"
        "  - id: tiny\n"
        "    source: a paper\n"
        "    metric: best_acc\n"
        "    seeds: 5\n"
        "    settings:\n"
        "      q2: {data.name: uci_har, partition.name: quantity, partition.classes_per_client: 2,\n"
        "           partition.num_clients: 75}\n"
        "    results:\n"
        "      fedavg: {q2: 66.99 ± 0.87}\n"
        "      flea: {q2: '75.17 +- 0.42'}\n"
    )
    best, last10 = build_tables(grouping, highlight="flea", reference=load_reference(path))
    text = to_markdown(best)
    assert _line(text, "method").startswith(
        "| method | uci_har Qua(2) K=75 | paper (tiny) | uci_har Dir(0.3)"
    )
    assert (
        _line(text, "fedavg") == "| fedavg | 60.00 ± 1.41 (n=2) | 66.99 ± 0.87 | 60.00 (n=1) | 50.00 (n=1) |"
    )
    assert _line(text, "fedlc").split(" | ")[2] == "–"
    assert _line(text, "flea").split(" | ")[2] == "75.17 ± 0.42"
    assert not last10.reference  # the paper reports best accuracy only
    rows = list(csv.DictReader(io.StringIO(to_csv([best]))))
    fedavg = next(r for r in rows if r["method"] == "fedavg" and "Qua" in r["setting"])
    assert (fedavg["paper_mean"], fedavg["paper_std"], fedavg["paper_source"]) == ("66.99", "0.87", "a paper")


def test_published_numbers_file_matches_our_settings(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path, method="flea", partition="dir0.1", num_clients=75)
    make_run(tmp_path, method="fedavg", partition="qua2", num_clients=150)
    make_run(tmp_path, method="fedrs", partition="qua2", num_clients=150)  # not in the paper
    make_run(tmp_path, method="flea", partition="qua2", num_clients=150, options={"decor_weight": 0.0})
    make_run(
        tmp_path, method="ccvr", partition="qua2", num_clients=150, options={"variant": "shared_features"}
    )
    reference = load_reference(REPO_ROOT / "docs" / "published_numbers.yaml")
    best, _ = build_tables(group_runs(load_runs(tmp_path)), reference=reference)
    found = {(row, col): stat for (row, col), (stat, _) in best.reference.items()}
    assert found[("flea", "uci_har Dir(0.1) K=75")].mean == 71.68
    assert found[("flea", "uci_har Dir(0.1) K=75")].std == 0.51
    assert found[("fedavg", "uci_har Qua(2) K=150")].mean == 65.77
    assert ("fedrs", "uci_har Qua(2) K=150") not in found
    assert ("flea (decor_weight=0.0)", "uci_har Qua(2) K=150") not in found  # not the paper's setting
    assert (
        found[("ccvr (variant=shared_features)", "uci_har Qua(2) K=150")].mean == 65.24
    )  # keyed by row label


def test_write_report_files_and_printing(tmp_path: Path, grouping: Grouping) -> None:
    runs_dir = grouping.cells[("fedavg", grouping.columns[0])][0].path.parents[3]
    printed = write_report(runs_dir, formats=["md"], highlight="flea")
    assert printed.files == [] and printed.printed[0].startswith("# 12 runs from")
    out = write_report(runs_dir, formats=["md", "csv", "tex"], out_dir=tmp_path / "out", highlight="flea")
    assert [p.name for p in out.files] == ["report.md", "report.csv", "report.tex"]
    tables = build_tables(group_runs(load_runs(runs_dir)), highlight="flea")
    assert (tmp_path / "out" / "report.csv").read_text() == render(tables, "csv")


def test_bad_format_is_rejected(tmp_path: Path) -> None:
    from fedaug.errors import ConfigError

    with pytest.raises(ConfigError, match="--format"):
        write_report(tmp_path, formats=["html"])


def test_methods_filter_keeps_only_their_runs(tmp_path: Path, grouping: Grouping) -> None:
    from fedaug.errors import FedaugError

    runs_dir = grouping.cells[("fedavg", grouping.columns[0])][0].path.parents[3]
    printed = write_report(runs_dir, formats=["md"], methods=["fedavg", "flea"]).printed[0]
    assert printed.startswith("# 7 runs from")  # fedavg 2 + 1 + 1, flea 3
    rows = {line.split(" | ")[0] for line in printed.splitlines() if line.startswith("| ")}
    assert rows == {"| method", "| fedavg", "| flea"}
    with pytest.raises(FedaugError, match=r"moon under .*with runs: fedavg, feddata, fedlc, flea"):
        write_report(runs_dir, methods=["fedavg", "moon"])


def test_gain_table_subtracts_the_baseline_in_each_setting_ours_and_the_papers(
    tmp_path: Path, grouping: Grouping
) -> None:
    path = tmp_path / "ref.yaml"
    path.write_text(
        "tables:\n"
        "  - {id: tiny, source: a paper, metric: best_acc, seeds: 5,\n"
        "     settings: {q2: {data.name: uci_har, partition.name: quantity,\n"
        "                     partition.classes_per_client: 2, partition.num_clients: 75}},\n"
        "     results: {fedavg: {q2: 66.99 ± 0.87}, flea: {q2: 75.17 ± 0.42}}}\n"
    )
    tables = build_tables(grouping, reference=load_reference(path), baseline="fedavg")
    assert [t.metric for t in tables] == ["best_acc", "best_acc_gain", "last10_acc", "last10_acc_gain"]
    gain = tables[1]
    text = to_markdown(gain)
    assert gain.title == "Best test accuracy minus fedavg's (points), paired by seed"
    # paired by seed: qua2 flea seed 0 72 - fedavg seed 0 59 = 13 (not 72 - the mean 60); paper 75.17 - 66.99
    assert (
        _line(text, "flea") == "| flea | 13.00 (n=1) | 8.18 | **10.00 (n=1)** | **3.00 (n=1)** |"
    )  # ties feddata
    assert _line(text, "fedavg") == "| fedavg | 0.00 ± 0.00 (n=2) | 0.00 | 0.00 (n=1) | 0.00 (n=1) |"
    assert _line(text, "fedlc").split(" | ")[2] == "–"  # no published FedLC number
    assert gain.best["uci_har Qua(2) K=75"] == {"feddata"}  # 80 - 59


def test_gain_std_is_the_spread_of_the_per_seed_differences(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # fedavg 59 / 61 / 70, flea 70 / 74 / 83 with the same seeds: differences 11, 13, 13 -> 12.33 ± 1.15,
    # although flea spreads by 6.66 points over the seeds; moon has seed 5 only: nothing to pair with
    for method, accs in {"fedavg": [0.59, 0.61, 0.70], "flea": [0.70, 0.74, 0.83], "moon": [0.9]}.items():
        for seed, value in enumerate(accs, start=5 if method == "moon" else 0):
            make_run(tmp_path, method=method, partition="qua2", seed=seed, accs=[value])
    best, gain = build_tables(group_runs(load_runs(tmp_path)), baseline="fedavg")[:2]
    column = "uci_har Qua(2) K=75"
    assert best.stats[("flea", column)].std == pytest.approx(6.658, abs=1e-3)
    assert gain.stats[("flea", column)].mean == pytest.approx(37 / 3)
    assert gain.stats[("flea", column)].std == pytest.approx(1.1547, abs=1e-4)
    assert gain.values[("flea", column)] == pytest.approx({0: 11.0, 1: 13.0, 2: 13.0})
    assert ("moon", column) not in gain.stats
    assert _line(to_markdown(gain), "moon") == "| moon | – |"


def test_gain_cells_pairing_runs_of_different_cpus_are_marked(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: fedavg seeds 0 and 1 on the Xeon and the EPYC; flea's seed 1 on the Xeon (pairs across CPUs),
    # moon's seeds on the same CPUs as fedavg's, fedlc's seed 1 without a recorded CPU
    cpus = {
        "fedavg": ("Intel Xeon", "AMD EPYC"),
        "flea": ("Intel Xeon", "Intel Xeon"),
        "moon": ("Intel Xeon", "AMD EPYC"),
        "fedlc": ("Intel Xeon", None),
    }
    gains = {"fedavg": 0.0, "flea": 0.1, "moon": 0.05, "fedlc": -0.02}  # the same for both seeds
    for method, by_seed in cpus.items():
        for seed, cpu in enumerate(by_seed):
            run_dir = make_run(tmp_path, method=method, seed=seed, accs=[0.5 + 0.01 * seed + gains[method]])
            if cpu is not None:
                (run_dir / "env.json").write_text(json.dumps({"cpu_model": cpu}))
    # Execute
    best, gain = build_tables(group_runs(load_runs(tmp_path)), baseline="fedavg")[:2]
    text, latex = to_markdown(gain), to_latex(gain)
    # Assert: only flea's cell is marked, in Markdown and LaTeX, with the footnote; the plain table is not
    column = "uci_har Qua(2) K=75"
    assert gain.cross_cpu == {("flea", column)}
    assert _line(text, "flea") == "| flea | **10.00 ± 0.00 (n=2)**‡ |"
    assert _line(text, "moon") == "| moon | 5.00 ± 0.00 (n=2) |"
    assert _line(text, "fedlc") == "| fedlc | -2.00 ± 0.00 (n=2) |"
    assert "‡ a seed's run and its baseline run ran on different CPU models" in text
    assert r"(n=2)}$^\ddagger$" in latex.replace("($n$=", "(n=")
    assert not best.cross_cpu and "‡" not in to_markdown(best)


@pytest.mark.parametrize("option", ["baseline", "highlight"])
def test_unknown_baseline_or_highlight_is_refused_naming_the_rows(grouping: Grouping, option: str) -> None:
    from fedaug.errors import FedaugError

    runs_dir = grouping.cells[("fedavg", grouping.columns[0])][0].path.parents[3]
    with pytest.raises(
        FedaugError, match=rf"--{option} moon: no such method among fedavg, fedlc, feddata, flea"
    ):
        write_report(runs_dir, **{option: "moon"})


def test_exclude_takes_any_method_but_refuses_a_typo(grouping: Grouping) -> None:
    from fedaug.errors import FedaugError

    runs_dir = grouping.cells[("fedavg", grouping.columns[0])][0].path.parents[3]
    assert write_report(runs_dir, highlight="flea", exclude=["moon"]).printed  # registered, no runs: fine
    with pytest.raises(FedaugError, match=r"--exclude fedav: not a method; methods with runs here: fedavg, "):
        write_report(runs_dir, highlight="flea", exclude=["fedav"])


def test_report_title_counts_the_cpus_and_a_fixed_partition_seed_is_its_own_column(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: four seeds, two with env.json naming their CPU, one on a GPU, one from before it was recorded;
    # and one run whose partition seed was fixed
    for seed, cpu in ((0, "Intel Xeon"), (1, "AMD EPYC"), (2, None), (3, "GPU")):
        run_dir = make_run(tmp_path, seed=seed)
        if cpu == "GPU":  # a run on CUDA counts under its GPU's name
            env = {"cpu_model": "Intel Xeon", "device": "cuda:0", "gpu_name": "NVIDIA H200"}
            (run_dir / "env.json").write_text(json.dumps(env))
        elif cpu is not None:
            (run_dir / "env.json").write_text(json.dumps({"cpu_model": cpu, "num_threads": 1}))
    fixed = make_run(tmp_path / "fixed", seed=1)
    config = yaml.safe_load((fixed / "config.yaml").read_text())
    config["partition"]["seed"] = 0
    (fixed / "config.yaml").write_text(yaml.safe_dump(config))
    (fixed / "env.json").write_text(json.dumps({"cpu_model": "AMD EPYC"}))
    # Execute
    printed = write_report([tmp_path], formats=["md"]).printed[0]
    # Assert: CPUs most first, then by name; the fixed-partition run is a column of its own
    title = printed.splitlines()[0]
    assert title.endswith("; ran on: AMD EPYC (2), Intel Xeon (1), NVIDIA H200 (1), not recorded (1)")
    assert "uci_har Qua(2) K=75 pseed=0" in printed
    assert "uci_har Qua(2) K=75 |" in printed


def test_reference_papers_names_the_shipped_file_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedaug.results.reference import PUBLISHED, locate_reference

    assert (REPO_ROOT / "docs" / "published_numbers.yaml").resolve() == PUBLISHED
    assert PUBLISHED.parent == Path(load_reference.__code__.co_filename).parent
    monkeypatch.chdir(tmp_path)
    assert locate_reference("papers") == PUBLISHED
    assert locate_reference("docs/published_numbers.yaml") == PUBLISHED  # a checkout's path, from elsewhere
    (tmp_path / "published_numbers.yaml").write_text("tables: []\n")
    assert locate_reference("published_numbers.yaml") == Path("published_numbers.yaml")  # a file wins
    assert locate_reference("mine.yaml") == Path("mine.yaml")  # load_reference then says it does not exist
    assert [t.id for t in load_reference(locate_reference("papers"))][:1] == ["flea_kdd2024"]
