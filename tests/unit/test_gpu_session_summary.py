"""benchmarks/gpu_session_summary.py turns a GPU session's files into the numbers issue #32 asks for."""

from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import gpu_session_summary


def _add(tar: tarfile.TarFile, name: str, rows: list[dict[str, float]]) -> None:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def session(tmp_path: Path) -> Path:
    (tmp_path / "machine.txt").write_text("name, memory.total\nNVIDIA H100 80GB HBM3, 81559 MiB\n")
    (tmp_path / "tests_graphs.txt").write_text("....\n28 passed in 80.1s\ntests exit 0 after 85 s\n")
    probe = {
        "methods": {
            "fedavg": [
                {"mode": "sequential", "median_round_s": 0.5},
                {
                    "mode": "graphs",
                    "median_round_s": 0.1,
                    "best_acc": 0.25,
                    "step_graphs": {"captured": 20, "record_s": 0.4},
                },
                # a diagnostic mode, faster here: not a way to run, so not the "alone" number
                {"mode": "graphs_unreleased", "median_round_s": 0.05},
            ]
        }
    }
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    (tmp_path / "grid.log").write_text("INFO 36 runs\nsweep exit 124 after 400 s\n")
    with tarfile.open(tmp_path / "grid_runs.tgz", "w:gz") as tar:
        # a finished FedAvg run (100 rounds of 1 s) and FLea cut short (50 rounds of 3 s), both K = 75
        _add(tar, "archive/uci_har-quantity2-K75/fedavg/seed0/timings.jsonl", [{"round_time": 1.0}] * 100)
        _add(
            tar,
            "archive/uci_har-quantity2-K75/fedavg/seed0/metrics.jsonl",
            [{"test/acc": 0.5}, {"test/acc": 0.7}],
        )
        _add(tar, "archive/uci_har-quantity2-K75/flea/seed0/timings.jsonl", [{"round_time": 3.0}] * 50)
    return tmp_path


def test_the_summary_gives_each_target_its_measured_number(session: Path) -> None:
    module = gpu_session_summary()
    summary = module.summarise(session)
    grid = summary["grid"]
    assert (grid["finished"], grid["rounds_done"], grid["sweep_s"]) == (1, 150, 400.0)
    assert grid["projected_s"] == 400.0 * 3600 / 150
    assert grid["runs"][0]["best_acc"] == 0.7 and grid["runs"][0]["seconds"] == 100.0
    targets = summary["targets"]
    assert targets["fedavg"]["alone_best_s"] == 10.0  # the graphs mode's 0.1 s a round x 100, not 0.05's
    # the sweep's 400 s shared by run time: FedAvg 100 of 250 s, for 1 run of 100 rounds; FLea 150 of 250 s,
    # for half a run
    assert targets["fedavg"]["packed_amortised_s"] == 160.0
    assert targets["flea"]["packed_amortised_s"] == 480.0
    text = module.render(summary)
    assert "| fedavg | graphs | 0.10 | 10.00 | 0.25 | 20 | - | - | 0.40 |" in text
    assert "1 of 36 runs finished, 150 of 3600 rounds in 400.00 s of sweep;" in text
    assert "| grid | 600 s | projected 9600.00 s; not met in one command |" in text


def test_a_session_split_into_commands_sums_its_sweeps_and_takes_the_last_archive(
    session: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # the grid resumed in a second command: its archive holds every run so far, its sweep ran 100 s more;
    # this archive's lines are gzipped (fedaug archive's format now), the first folder's plain
    resumed = tmp_path_factory.mktemp("resumed")
    (resumed / "grid.log").write_text(
        "sweep exit 0 after 100 s\nGPU memory used during the sweep, max MiB: 41612\n"
    )
    with tarfile.open(resumed / "grid_runs.tgz", "w:gz") as tar:
        for method in ("fedavg", "flea"):
            name = f"archive/uci_har-quantity2-K75/{method}/seed0/timings.jsonl.gz"
            _add(tar, name, [{"round_time": 1.0}] * 100)
    module = gpu_session_summary()
    summary = module.summarise(session, resumed)
    grid = summary["grid"]
    assert (grid["finished"], grid["rounds_done"], grid["sweep_s"], grid["sweep_commands"]) == (
        2,
        200,
        500.0,
        2,
    )
    assert summary["probe"] and summary["machine"][1].startswith("NVIDIA H100")  # from the first folder
    assert grid["max_gpu_memory_mib"] == 41612.0
    text = module.render(summary)
    assert "in 500.00 s of sweep (summed over 2 commands)" in text
    assert "GPU memory used during the sweep, at most 41612 MiB" in text


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = gpu_session_summary()
    argv = sys.argv
    sys.argv = ["gpu_session_summary.py", str(tmp_path / "nope")]
    try:
        assert module.main() == 2
    finally:
        sys.argv = argv
    assert capsys.readouterr().err == f"gpu_session_summary.py: error: no folder {tmp_path / 'nope'}\n"


def test_the_grid_target_is_met_only_by_all_36_runs_in_one_command_of_10_minutes(tmp_path: Path) -> None:
    runs = [
        f"archive/uci_har-{split}-K{k}/{method}/seed{seed}/timings.jsonl.gz"
        for split in ("quantity2", "dirichlet0.3", "dirichlet0.1")
        for k in (75, 150)
        for method in ("fedavg", "flea")
        for seed in range(3)
    ]
    module = gpu_session_summary()
    verdicts = []
    for sweep_s, run_names in ((590, runs), (610, runs), (590, runs[:-1])):
        folder = tmp_path / f"{sweep_s}-{len(run_names)}"
        folder.mkdir()
        (folder / "grid.log").write_text(f"sweep exit 0 after {sweep_s} s\n")
        with tarfile.open(folder / "grid_runs.tgz", "w:gz") as tar:
            for name in run_names:
                _add(tar, name, [{"round_time": 1.0}] * 100)
        summary = module.summarise(folder)
        verdicts.append((summary["grid"]["finished"], summary["targets"]["grid"]["met"]))
    assert verdicts == [(36, True), (36, False), (35, False)]
    assert "; met: 36 runs in one command |" in module.render(module.summarise(tmp_path / "590-36"))


def test_the_grid_is_compared_with_a_reference_archive_by_seed(tmp_path: Path) -> None:
    def accs(best: float, last: float) -> list[dict[str, float]]:  # 100 rounds: a peak, then 10 at `last`
        return [{"test/acc": 0.1}] * 89 + [{"test/acc": best}] + [{"test/acc": last}] * 10

    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "grid.log").write_text("sweep exit 0 after 300 s\n")
    with tarfile.open(grid / "grid_runs.tgz", "w:gz") as tar:
        for seed, (best, last) in enumerate([(0.80, 0.70), (0.76, 0.60)]):
            run = f"archive/uci_har-quantity2-K75/flea/seed{seed}"
            _add(tar, f"{run}/timings.jsonl.gz", [{"round_time": 1.0}] * 100)
            _add(tar, f"{run}/metrics.jsonl.gz", accs(best, last))
        _add(tar, "archive/uci_har-quantity2-K75/fedavg/seed0/timings.jsonl.gz", [{"round_time": 1.0}] * 100)
    reference = tmp_path / "reference"
    for seed, (best, last) in enumerate([(0.78, 0.72), (0.74, 0.64)]):
        run_dir = reference / "uci_har-quantity2-K75" / "flea" / f"seed{seed}"
        run_dir.mkdir(parents=True)
        text = "".join(json.dumps(r) + "\n" for r in accs(best, last))
        if seed == 0:  # an archive written before the lines were gzipped
            (run_dir / "metrics.jsonl").write_text(text)
        else:
            (run_dir / "metrics.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    module = gpu_session_summary()
    summary = module.summarise(grid, reference=reference)
    # best: +2 and +2 points; last-10: -2 and -4; FedAvg has no metrics and no reference: left out
    assert summary["reference"]["rows"] == [
        {
            "setting": "uci_har-quantity2-K75",
            "method": "flea",
            "seeds": 2,
            "best_points": 2.0,
            "last10_points": -3.0,
        }
    ]
    assert "| uci_har-quantity2-K75 | flea | 2 | +2.00 | -3.00 |" in module.render(summary)
