"""Sweep files: grid expansion, options dropped on renames, run dir names, --grid, dry runs (no training)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from fedaug.cli.main import main
from fedaug.config.load import check_sweep_overrides
from fedaug.errors import ConfigError
from fedaug.sweeps import workers
from fedaug.sweeps.sweep import (
    expand_grid,
    expand_sweep,
    name_suffix,
    point_patch,
    read_sweep,
    run_sweep,
)
from tests.conftest import REPO_ROOT
from tests.unit.experiments.helpers import write_sweep


def test_cartesian_product_and_concatenated_blocks() -> None:
    blocks = [{"method": ["fedavg", "flea"], "seed": [0, 1, 2]}, {"method": ["fedprox"]}]
    points = expand_grid(blocks)
    assert len(points) == 2 * 3 + 1
    assert points[:2] == [{"method": "fedavg", "seed": 0}, {"method": "fedavg", "seed": 1}]
    assert points[-1] == {"method": "fedprox"}


def test_point_patch_is_like_set() -> None:
    assert point_patch("method", "flea") == {"method": {"name": "flea"}}
    assert point_patch("method.decor_weight", 0) == {"method": {"decor_weight": 0}}
    assert point_patch("partition", {"name": "iid"}) == {"partition": {"name": "iid"}}
    assert point_patch("seed", 3) == {"seed": 3}


def test_counts_and_run_dirs(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        "grid:\n"
        "  partition: [{name: quantity, classes_per_client: 2}, {name: dirichlet, alpha: 0.3}]\n"
        "  method: [fedavg, flea]\n"
        "  seed: [0, 1, 2]\n",
    )
    points = expand_sweep(path)
    assert len(points) == 2 * 2 * 3
    assert len({p.run_dir for p in points}) == len(points)
    root = tmp_path / "runs" / "sw"
    assert points[0].run_dir == root / "synthetic-quantity2-K6" / "fedavg" / "seed0"
    assert points[-1].run_dir == root / "synthetic-dirichlet0.3_2-K6" / "flea" / "seed2"
    assert all(p.config.engine.num_threads == 1 for p in points)  # fixed, so --workers cannot change results


def test_renaming_drops_the_previous_options(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        "method: {name: flea, decor_weight: 0.0}\n"
        "grid:\n"
        "  partition: [{name: quantity, classes_per_client: 2}]\n"
        "  method: [fedavg, flea]\n",
    )
    fedavg, flea = expand_sweep(path)
    assert fedavg.config.partition.options == {"classes_per_client": 2}  # smoke's alpha/min_size dropped
    assert fedavg.config.method.options == {}  # flea's decor_weight dropped on the rename
    assert flea.config.method.options == {"decor_weight": 0.0}  # same name: kept


def test_keys_not_in_the_run_dir_name_the_experiment(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path, "grid:\n  method: [flea]\n  method.decor_weight: [0.0, 3.0]\n  train.lr: [0.001]\n"
    )
    points = expand_sweep(path)
    assert [p.config.name for p in points] == [
        "sw/method.decor_weight=0.0,train.lr=0.001",
        "sw/method.decor_weight=3.0,train.lr=0.001",
    ]
    assert points[0].run_dir.parts[-5:-3] == ("sw", "method.decor_weight=0.0,train.lr=0.001")
    assert name_suffix({"method": {"name": "flea", "mix_beta": 5.0}, "seed": 1}) == "method.mix_beta=5.0"
    assert name_suffix({"partition": {"name": "dirichlet", "alpha": 0.1}, "partition.num_clients": 9}) == ""


def test_one_at_a_time_blocks(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        "grid:\n"
        "  - {method: [fedavg, flea], seed: [0]}\n"
        "  - {method: [flea], method.mix_beta: [0.5, 5.0], seed: [0]}\n",
    )
    points = expand_sweep(path)
    assert [(p.config.method.name, p.config.method.options) for p in points] == [
        ("fedavg", {}),
        ("flea", {}),
        ("flea", {"mix_beta": 0.5}),
        ("flea", {"mix_beta": 5.0}),
    ]


def test_grid_overrides_and_base_overrides(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "grid:\n  method: [fedavg, flea]\n  seed: [0, 1, 2]\n")
    points = expand_sweep(path, ["train.rounds=1"], ["seed=[4]", "partition.num_clients=[3, 4]"])
    assert [(p.config.seed, p.config.partition.num_clients) for p in points] == [(4, 3), (4, 4)] * 2
    assert all(p.config.train.rounds == 1 for p in points)


def test_compare_becomes_the_method_axis(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "compare: [fedavg, flea]\ngrid:\n  seed: [0, 1]\n")
    tree, blocks = read_sweep(path)
    assert blocks == [{"method": ["fedavg", "flea"], "seed": [0, 1]}]
    assert tree["compare"] == []
    # the last axis: the compared methods of seed 0 finish before seed 1 starts (fedaug sweep default)
    points = expand_sweep(path)
    assert [(p.config.seed, p.config.method.name) for p in points] == [
        (0, "fedavg"),
        (0, "flea"),
        (1, "fedavg"),
        (1, "flea"),
    ]


def test_a_method_outside_compare_is_refused_unless_the_grid_names_methods(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "compare: [fedavg, flea]\ngrid:\n  seed: [0, 1]\n")
    with pytest.raises(ConfigError, match=r"method 'fedprox' is not among .* \(compare: \[fedavg, flea\]\)"):
        read_sweep(path, ["method=fedprox"])
    assert read_sweep(path, ["method=fedprox", "compare=[]"])[1] == [{"seed": [0, 1]}]
    _, blocks = read_sweep(path, ["method=fedprox"], ["method=[fedprox, flea]"])  # the grid's methods run
    assert blocks == [{"seed": [0, 1], "method": ["fedprox", "flea"]}]


def test_duplicates_are_run_once_and_clashes_refused(tmp_path: Path) -> None:
    assert len(expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0, 0]\n"))) == 1
    clash = write_sweep(tmp_path, "grid:\n  method: [flea]\n  method.decor_weight: [1, '1']\n")
    with pytest.raises(ConfigError, match="share the run dir"):
        expand_sweep(clash)


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("grid: [3]\n", "must be a mapping"),
        ("grid:\n  seed: 3\n", "grid.seed .* must be a non-empty list"),
        ("grid:\n  seed: []\n", "non-empty list"),
        ("grid:\n  train.roundz: [1]\n", "unknown config key 'train.roundz'"),
    ],
)
def test_bad_grids(tmp_path: Path, grid: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        expand_sweep(write_sweep(tmp_path, grid))


def test_bad_grid_override(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--grid"):
        expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0]\n"), grid_overrides=["seed=3"])


def test_dry_run_lists_run_dirs_and_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_sweep(tmp_path, "grid:\n  method: [fedavg, flea]\n")
    finished = tmp_path / "runs" / "sw" / "synthetic-dirichlet0.5_2-K6" / "fedavg" / "seed0"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text('{"rounds": 3}')
    assert main(["sweep", str(path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["finished", str(finished)]
    assert lines[1].split()[:2] == ["new", "?"] and lines[1].endswith("flea/seed0")  # no FLea times yet
    assert lines[-1].startswith("2 runs: 1 finished, 1 new; no estimate yet")  # not "about 0 s"
    assert not (tmp_path / "runs" / "sw" / "synthetic-dirichlet0.5_2-K6" / "flea").exists()


def test_presets_expand(capsys: pytest.CaptureFixture[str]) -> None:
    counts = {
        "flea_table1_har": 360,
        "flea_table1_cifar10": 300,
        "flea_table1_us8k": 300,
        "flea_hparams_har": 54,
        "scarcity_cifar10": 54,
    }
    for name, count in counts.items():
        points = expand_sweep(REPO_ROOT / "configs" / "experiments" / f"{name}.yaml")
        assert len(points) == count, name
    table1 = expand_sweep(REPO_ROOT / "configs" / "experiments" / "flea_table1_har.yaml")
    assert {p.config.partition.num_clients for p in table1} == {75, 150}
    assert {p.config.method.name for p in table1} >= {"fedavg", "fedprox", "feddecorr", "fedlc", "flea"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, r"--workers must be in 1\.\.1024, got 0"),
        ({"workers": 2, "heartbeat": -1.0}, r"--heartbeat must be a finite number >= 0, got -1.0"),
        ({"workers": 2, "heartbeat": float("nan")}, r"--heartbeat must be a finite number >= 0, got nan"),
        ({"order": "random"}, r"--order must be one of grid, longest-first, got 'random'"),
    ],
)
def test_bad_workers_or_heartbeat_is_refused_before_any_run(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_sweep([], **kwargs)


def test_flea_objective_preset_has_every_variant_per_split_and_seed() -> None:
    points = expand_sweep(REPO_ROOT / "configs" / "experiments" / "flea_objective_har.yaml")
    assert len(points) == 30 and len({p.run_dir for p in points}) == 30
    official = [p for p in points if p.config.method.name == "flea_official"]
    assert len(official) == 6
    assert all(p.config.train.reset_optimizer_every_step for p in official)
    assert all(p.config.train.lr_schedule == "official_flea" for p in official)
    assert not any(p.config.train.reset_optimizer_every_step for p in points if p not in official)
    eq6 = [p for p in points if p.config.method.name == "flea_eq6"]
    variants = {tuple(sorted(p.config.method.options.items())) for p in eq6}
    assert variants == {
        (),
        (("local_ce_weight", 1.0),),
        (("decor_form", "dcor"), ("decor_schedule", "official"), ("local_ce_weight", 1.0)),
    }


def test_more_cpu_threads_than_cores_is_a_warning_naming_what_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers, "usable_cores", lambda: 4)
    points = expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2, 3, 4, 5]\n"), ["engine.device=cpu"])
    assert workers.cpu_oversubscription(points, 4) is None  # one thread a run (a sweep's default) per core
    assert workers.cpu_oversubscription(points[:2], 8) is None  # two runs cannot use 8 workers
    for point in points[:4]:  # finished runs are skipped: two left for 6 workers
        point.run_dir.mkdir(parents=True)
        (point.run_dir / "summary.json").write_text(f'{{"rounds": {point.config.train.rounds}}}')
    assert workers.cpu_oversubscription(points, 6) is None
    for point in points[:4]:
        (point.run_dir / "summary.json").unlink()
    assert workers.cpu_oversubscription(points, 6) == (
        "--workers 6 with engine.num_threads=1 runs 6 threads on this machine's 4 CPU cores: the runs share "
        "cores, so each goes slower and the sweep ends no sooner (--workers 4 fits)"
    )
    two = expand_sweep(
        write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2]\n"), ["engine.device=cpu", "engine.num_threads=2"]
    )
    assert "runs 6 threads" in str(workers.cpu_oversubscription(two, 3))
    assert "(--workers 2 fits)" in str(workers.cpu_oversubscription(two, 3))
    gpu = expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2, 3, 4, 5]\n"), ["engine.device=cuda"])
    assert workers.cpu_oversubscription(gpu, 6) is None  # GPU runs (or a GPU this machine lacks) not counted


def test_dry_run_notes_more_workers_than_cores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    path = write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2]\n")
    assert main(["sweep", str(path), "--device", "cpu", "--workers", "3", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "note: --workers 3 with engine.num_threads=1 runs 3 threads on this machine's 2 CPU cores: the runs "
        "share cores, so each goes slower and the sweep ends no sooner (--workers 2 fits)"
    )
    assert main(["sweep", str(path), "--device", "cpu", "--workers", "2", "--dry-run"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_gpu_runs_one_at_a_time_get_a_note_naming_the_workers_that_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as on a GPU machine with 8 cores: auto and cuda resolve to the GPU
    monkeypatch.setattr(workers, "usable_cores", lambda: 8)

    def gpu_machine(name: str) -> torch.device:
        return torch.device("cpu" if name == "cpu" else "cuda")

    monkeypatch.setattr(workers, "resolve_device", gpu_machine)
    three = expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2]\n"), ["engine.device=cuda"])
    assert workers.gpu_underuse(three, 1) == (
        "3 runs on a GPU one at a time: --workers 3 runs 3 at once on it, which finishes sooner (each run "
        "alone leaves the GPU mostly idle; each takes about 2-3 GiB of its memory with the default preset; "
        "docs/guide/gpu.md)"
    )
    assert workers.gpu_underuse(three, 2) is None  # already shared
    assert workers.gpu_underuse(three[:1], 1) is None  # one run: nothing to share
    assert workers.gpu_underuse(expand_sweep(tmp_path / "sweep.yaml", ["engine.device=cpu"]), 1) is None
    ten = expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"), [])
    assert "--workers 8 runs 8 at once" in str(workers.gpu_underuse(ten, 1))  # a core per worker
    for point in ten[:9]:  # finished runs are not counted: one left
        point.run_dir.mkdir(parents=True)
        (point.run_dir / "summary.json").write_text(f'{{"rounds": {point.config.train.rounds}}}')
    assert workers.gpu_underuse(ten, 1) is None


def test_a_method_option_the_method_axis_would_drop_is_refused(tmp_path: Path) -> None:
    """`--set method.proximal_mu=0.5` before an axis that renames fedavg to fedprox never reaches FedProx (the
    rename drops the options): refused, naming the method and the spelling that works. A method without the
    option (FedAvg) is not expected to carry it, and an axis entry that sets it passes."""
    path = write_sweep(tmp_path, "grid:\n  method: [fedavg, fedprox]\n")
    with pytest.raises(ConfigError, match=r"does not reach fedprox .*\{name: fedprox, proximal_mu: 0.5\}"):
        expand_sweep(path, ["method.proximal_mu=0.5"])
    kept = write_sweep(tmp_path, "grid:\n  method: [fedavg, {name: fedprox, proximal_mu: 0.5}]\n")
    assert expand_sweep(kept, ["method.proximal_mu=0.5"])[1].config.method.options == {"proximal_mu": 0.5}
    elsewhere = write_sweep(tmp_path, "grid:\n  method: [fedlc]\n")
    with pytest.raises(ConfigError, match="does not reach fedlc"):  # FedLC has no decor_weight: no run
        expand_sweep(elsewhere, ["method.decor_weight=0"])


def test_a_bad_set_is_refused_on_the_sweeps_base_and_a_base_only_its_grid_completes_is_left_to_the_points(
    tmp_path: Path,
) -> None:
    # Prepare: a sweep whose base loads, and one whose base is completed only by its grid (rounds 0 alone)
    good = write_sweep(tmp_path, "grid:\n  method: [fedavg, flea]\n")
    (tmp_path / "partial").mkdir()
    partial = write_sweep(tmp_path / "partial", "train: {rounds: 0}\ngrid:\n  train.rounds: [1, 2]\n")
    # Execute / Assert: what the points would refuse, refused from the base (fedaug.config.load: no torch)
    check_sweep_overrides(good, ["seed=1"])
    with pytest.raises(ConfigError, match=re.escape("unknown config key 'train.nope'")):
        check_sweep_overrides(good, ["train.nope=1"])
    with pytest.raises(ConfigError, match=re.escape("train.rounds must be of type int, got 'x'")):
        check_sweep_overrides(good, ["train.rounds=x"], smoke=True)
    with pytest.raises(ConfigError, match=re.escape("must look like key.path=value")):
        check_sweep_overrides(partial, ["seed"])
    check_sweep_overrides(partial, ["train.nope=1"])  # the base alone fails: the points' own checks say
    with pytest.raises(ConfigError, match=re.escape("unknown config key 'train.nope'")):
        expand_sweep(partial, ["train.nope=1"])
    assert [p.config.train.rounds for p in expand_sweep(partial)] == [1, 2]
