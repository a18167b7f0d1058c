"""Helpers shared by the dataset tests."""

from __future__ import annotations

import struct


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    """An IDX file (MNIST's format): big-endian magic number, one uint32 per dimension, then ``payload``."""
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload
