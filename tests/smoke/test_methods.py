"""Every registered method runs 2 rounds on 3 synthetic clients (new methods get this test for free).

The clients' 8-dim blobs are shaped as 1 x 2 x 4 images and the model has a BatchNorm layer, so image-only
methods (Fed-AugMix) and BN-only ones (Fed-ZDAC/ZDAS) run here too (:func:`tests.helpers.run_on_device`).
The same check runs on CUDA in ``tests/gpu/`` when a GPU is present.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedaug import registry
from fedaug.runtime.device import resolve_device
from tests.helpers import run_on_device


@pytest.mark.parametrize("name", registry.available("method"))
def test_method_runs_two_rounds_with_its_state_on_the_device(tmp_path: Path, name: str) -> None:
    run_on_device(tmp_path, name, resolve_device("cpu"))
