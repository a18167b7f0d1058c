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
