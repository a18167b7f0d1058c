"""Type aliases used across fedaug signatures."""

from __future__ import annotations

from typing import Any

from torch import Tensor

StateDict = dict[str, Tensor]
"""A model's ``state_dict`` (parameters and buffers, BN running statistics included)."""

ClientId = int
Metrics = dict[str, float]
"""Scalar metrics keyed like ``"train/loss"`` or ``"test/acc"``."""

Extra = dict[str, Any]
"""Method-specific serialisable content of states and messages (tensors, numbers, lists, dicts)."""
