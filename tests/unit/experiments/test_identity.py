"""Which config keys change results: the one rule resume, branching, sweeps and result tables share."""

from __future__ import annotations

import pytest

from fedaug.config.identity import changes_results, flatten, result_config


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("name", False),
        ("out_dir", False),
        ("compare", False),
        ("data.data_dir", False),
        ("model.stand_in_for", False),  # a report label
        ("model.name", True),
        ("engine.num_threads", False),
        ("engine.branch_from_fedavg", False),
        ("engine.precision", True),
        ("engine.flush_denormals", True),
        ("seed", True),
        ("data.name", True),
        ("train.lr", True),
        ("method.mu", True),
        ("data.data_dir_extra", True),  # a prefix of a neutral key's name is not that key
        ("named", True),
    ],
)
def test_changes_results(key: str, expected: bool) -> None:
    assert changes_results(key) is expected


def test_flatten_dotted_keys() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2], "e": {}}


def test_result_config_drops_only_neutral_keys() -> None:
    tree = {
        "name": "x/y",
        "seed": 3,
        "data": {"name": "uci_har", "data_dir": "/data"},
        "engine": {"num_threads": 2, "precision": "bf16"},
        "compare": ["fedavg"],
    }
    assert result_config(tree) == {"seed": 3, "data.name": "uci_har", "engine.precision": "bf16"}


def test_a_stand_in_model_label_survives_a_model_grid_and_changes_no_identity() -> None:
    from fedaug.config.load import config_to_dict
    from fedaug.errors import ConfigError
    from fedaug.sweeps.sweep import expand_sweep

    preset = "configs/experiments/flea_cifar10_standin.yaml"
    pilot = ["model.name=[bn_cnn_cifar, lenet5]", "seed=[0]", "method=[fedavg]"]  # the pilot's grid
    points = expand_sweep(preset, grid_overrides=pilot)
    assert {(p.config.model.name, p.config.model.stand_in_for) for p in points} == {
        ("bn_cnn_cifar", "MobileNetV2"),
        ("lenet5", "MobileNetV2"),
    }
    plain = expand_sweep(preset, ["model.stand_in_for=null"], pilot)
    assert [result_config(config_to_dict(p.config)) for p in points] == [
        result_config(config_to_dict(p.config)) for p in plain
    ]
    with pytest.raises(ConfigError, match=r"model.stand_in_for must be the name.*got ''"):
        expand_sweep(preset, ["model.stand_in_for="], pilot)
