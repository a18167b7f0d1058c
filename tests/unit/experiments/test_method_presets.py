"""Every preset in configs/methods/ loads, names a registered method and builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedaug import registry
from fedaug.config.load import load_config
from fedaug.runs.resolve import build_method
from tests.conftest import REPO_ROOT

PRESETS = sorted((REPO_ROOT / "configs" / "methods").glob("*.yaml"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_method_preset_builds(path: Path) -> None:
    config = load_config([path])
    assert config.method.name in registry.available("method")
    assert build_method(config).name == config.method.name
