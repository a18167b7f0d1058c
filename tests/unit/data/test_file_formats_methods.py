"""Every registered method trains on data read by ``image_folder`` (PNGs written in tmp_path): the formats
give an ordinary Dataset, so nothing of a method depends on where its data came from. Slow: one run of each
method (about 30)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedaug import registry
from fedaug.config.load import load_config
from fedaug.runs.runner import run_experiment
from tests.conftest import SMOKE

ZDA = ["method.start_round=1", "method.gen_iterations=5", "method.samples_per_class=2"]
OPTIONS = {"ccvr": ["method.virtual_per_class=50", "method.calibrate_every_round=true"], "fedzdac": ZDA}
OPTIONS["fedzdas"] = ZDA


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for label in range(3):
        (root / f"class{label}").mkdir()
        for i in range(16):
            pixels = np.clip(rng.normal(60 * (label + 1), 40, (16, 16)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(root / f"class{label}" / f"{i}.png")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", registry.available("method"))
def test_every_method_trains_on_an_image_folder(name: str, folder: Path, tmp_path: Path) -> None:
    sets = ["data=image_folder", f"data.path={folder}", "data.grayscale=true", "model=bn_cnn_mnist"]
    sets += [
        "partition=quantity",
        "partition.classes_per_client=2",
        "partition.num_clients=4",
        f"method={name}",
    ]
    sets += ["train.rounds=1", "train.clients_per_round=2", f"out_dir={tmp_path}", "engine.num_threads=1"]
    config = load_config([SMOKE], [*sets, "engine.progress=false", *OPTIONS.get(name, [])])
    summary = run_experiment(config)
    assert summary["rounds"] == 1 and 0.0 <= summary["final_acc"] <= 1.0
