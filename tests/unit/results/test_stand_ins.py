"""Runs on the CIFAR-10 JPEG copy are labelled "CIFAR-10 (JPEG q75 copy)" in every table, plot and header."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from fedaug.results.reference import PUBLISHED
from fedaug.results.report import write_report
from fedaug.results.stand_ins import (
    dataset_label,
    labels_stand_in,
    model_label,
    stand_in_model_notes,
    stand_in_notes,
)
from fedaug.results.store import load_runs, setting_label

LABEL = "CIFAR-10 (JPEG q75 copy)"


def _cifar_run(make_run: Callable[..., Path], root: Path, method: str, seed: int, variant: str) -> Path:
    run_dir = make_run(root, method=method, seed=seed, accs=[0.30, 0.40 + 0.1 * seed])
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["data"] = {"name": "cifar10", "variant": variant, "data_dir": None}
    config["model"] = {"name": "mobilenet_v2_cifar"}
    config["partition"].update(name="quantity", classes_per_client=3, num_clients=500)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def test_the_dataset_label_names_the_copy_and_only_the_copy() -> None:
    assert dataset_label({"data.name": "cifar10", "data.variant": "jpeg_lossy"}) == LABEL
    assert dataset_label({"data.name": "cifar10", "data.variant": "official"}) == "cifar10"
    assert dataset_label({"data.name": "uci_har"}) == "uci_har"
    assert labels_stand_in(f"{LABEL} Qua(3) K=500") and not labels_stand_in("cifar10 Qua(3) K=500")
    configs = [{"data.name": "cifar10", "data.variant": v} for v in ("jpeg_lossy", "official", "jpeg_lossy")]
    (note,) = stand_in_notes(configs)
    assert note.startswith(LABEL) and "was not measured" in note
    assert stand_in_notes(configs[1:2]) == []


def test_a_report_on_the_copy_labels_its_columns_paper_header_plots_and_title(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    for seed in (0, 1):
        for method in ("fedavg", "flea"):
            _cifar_run(make_run, tmp_path / "runs", method, seed, "jpeg_lossy")
    (run,) = {setting_label(r.config) for r in load_runs(tmp_path / "runs")}
    assert run == f"{LABEL} Qua(3) K=500"
    outputs = write_report(tmp_path / "runs", formats=("md", "csv"), out_dir=tmp_path / "out",
                           reference=PUBLISHED, plots=True)  # fmt: skip
    report = (tmp_path / "out" / "report.md").read_text()
    title, blank, data = report.splitlines()[:3]
    assert title.startswith("# 4 runs") and blank == "" and data.startswith(f"Data: {LABEL}: a lossy JPEG")
    header = next(line for line in report.splitlines() if line.startswith("| method |"))
    # the paper's CIFAR-10 number sits beside our column only under both labels
    assert f"| {LABEL} Qua(3) K=500 | paper (flea_kdd2024; the paper's data, not this copy) |" in header
    assert "| cifar10 " not in report and LABEL in (tmp_path / "out" / "report.csv").read_text()
    curves = [p.name for p in outputs.files if p.name.startswith("curves_")]
    assert curves == ["curves_CIFAR-10_JPEG_q75_copy_Qua3_K500.png"]


def test_official_cifar10_runs_keep_the_plain_name(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    _cifar_run(make_run, tmp_path / "runs", "fedavg", 0, "official")
    write_report(tmp_path / "runs", out_dir=tmp_path / "out", reference=PUBLISHED)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| cifar10 Qua(3) K=500 | paper (flea_kdd2024) |" in report and "JPEG" not in report


STAND_IN = "(stand-in model for MobileNetV2)"


def _stand_in_model_run(make_run: Callable[..., Path], root: Path, model: str, seed: int) -> Path:
    run_dir = _cifar_run(make_run, root / model, "fedavg", seed, "jpeg_lossy")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["model"] = {"name": model, "stand_in_for": "MobileNetV2"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def test_the_model_label_names_a_stand_in_and_only_a_stand_in() -> None:
    assert model_label({"model.name": "bn_cnn_cifar", "model.stand_in_for": "MobileNetV2"}) == (
        f"bn_cnn_cifar {STAND_IN}"
    )
    assert model_label({"model.name": "bn_cnn_cifar", "model.stand_in_for": None}) == "bn_cnn_cifar"
    assert model_label({"model.name": "harnet"}) == "harnet"
    configs = [{"model.name": m, "model.stand_in_for": "MobileNetV2"} for m in ("lenet5", "bn_cnn_cifar")]
    assert stand_in_model_notes([*configs, configs[0], {"model.name": "harnet"}]) == [
        f"{m} is a stand-in model for the paper's MobileNetV2: these are not MobileNetV2's numbers"
        for m in ("lenet5", "bn_cnn_cifar")
    ]


def test_a_report_on_stand_in_models_says_so_in_every_column_and_its_header(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: the pilot's shape, two stand-ins side by side (model.name differs between the runs)
    for model in ("bn_cnn_cifar", "lenet5"):
        _stand_in_model_run(make_run, tmp_path / "runs", model, 0)
    # Execute
    outputs = write_report(tmp_path / "runs", out_dir=tmp_path / "out", reference=PUBLISHED, plots=True)
    # Assert: each column names its model as a stand-in (not as name=...); the header says for what
    report = (tmp_path / "out" / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| method |"))
    columns = [f"{LABEL} Qua(3) K=500, {model} {STAND_IN}" for model in ("bn_cnn_cifar", "lenet5")]
    assert header == f"| method | {' | '.join(columns)} |"
    assert "name=" not in report
    assert "\n\nModel: bn_cnn_cifar is a stand-in model for the paper's MobileNetV2" in report
    assert "\n\nModel: lenet5 is a stand-in model" in report
    curves = sorted(p.name for p in outputs.files if p.name.startswith("curves_"))
    assert all("stand-in_model_for_MobileNetV2" in name for name in curves) and len(curves) == 2


def test_one_stand_in_model_is_named_though_the_model_never_varies(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    for seed in (0, 1):
        _stand_in_model_run(make_run, tmp_path / "runs", "bn_cnn_cifar", seed)
    (column,) = {setting_label(r.config) for r in load_runs(tmp_path / "runs")}
    assert column == f"{LABEL} Qua(3) K=500, bn_cnn_cifar {STAND_IN}"


def test_the_run_title_of_a_config_names_its_stand_in_model() -> None:
    from fedaug.config.load import load_config
    from fedaug.results.store import config_setting_label

    config = load_config([], ["model.name=bn_cnn_cifar", "model.stand_in_for=MobileNetV2"])
    assert config_setting_label(config) == f"uci_har Qua(2) K=75, bn_cnn_cifar {STAND_IN}"
    assert config_setting_label(load_config([], ["model.name=bn_cnn_cifar"])) == "uci_har Qua(2) K=75"


def test_the_pilot_table_takes_seed_0_only_though_the_grid_shares_its_setting(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    from tools.results.common import Archive
    from tools.results.studies_flea import STANDIN, standin_pilot

    # Prepare: LeNet-5's Qua(3) FedAvg and FLea on seeds 0 and 1, as the grid archives them beside the pilot
    study = tmp_path / STANDIN[0]
    for method in ("fedavg", "flea"):
        for seed in (0, 1):
            run_dir = _stand_in_model_run(make_run, study / method, "lenet5", seed)
            config = yaml.safe_load((run_dir / "config.yaml").read_text())
            config["method"]["name"] = method
            config["partition"]["num_clients"] = 500
            (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    # Act
    table = standin_pilot(Archive(tmp_path))
    # Assert: seed 0's best 40.00 (seed 1's is 50.00), one value, no spread over seeds
    row = next(line for line in table.splitlines() if line.startswith("| `lenet5`"))
    assert row == "| `lenet5` | 40.00 / 35.00 | 40.00 / 35.00 | +0.00 | +0.00 |"
