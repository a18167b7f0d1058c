"""Exact-number tests of FedAvg's weighted mean (fedjax fed_avg_test style)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedaug.methods.parts.aggregate import weighted_average


def test_weighted_average_exact_numbers() -> None:
    # Prepare: two hand-sized clients with 1 and 3 samples.
    first = {"w": torch.tensor([1.0, 2.0]), "bn.num_batches_tracked": torch.tensor(4)}
    second = {"w": torch.tensor([3.0, 6.0]), "bn.num_batches_tracked": torch.tensor(7)}
    # Execute
    result = weighted_average([first, second], [1, 3])
    # Assert: (1*1 + 3*3)/4 = 2.5, (1*2 + 3*6)/4 = 5.0; step counters take the max.
    torch.testing.assert_close(result["w"], torch.tensor([2.5, 5.0]), rtol=0, atol=0)
    assert result["bn.num_batches_tracked"].item() == 7
    assert result["w"].dtype == torch.float32


def test_weighted_average_matches_numpy_average() -> None:
    gen = torch.Generator().manual_seed(0)
    states = [{"a": torch.randn(4, 3, generator=gen), "b": torch.randn(5, generator=gen)} for _ in range(5)]
    weights = [3, 17, 1, 40, 9]
    result = weighted_average(states, weights)
    for key in ("a", "b"):
        expected = np.average(np.stack([s[key].numpy() for s in states]), axis=0, weights=weights)
        np.testing.assert_allclose(result[key].numpy(), expected, rtol=1e-6)


def test_weighted_average_rejects_bad_weights() -> None:
    with pytest.raises(ValueError, match="one weight per state"):
        weighted_average([{"a": torch.zeros(1)}], [1, 2])
    with pytest.raises(ValueError, match="sum to > 0"):
        weighted_average([{"a": torch.zeros(1)}], [0])
