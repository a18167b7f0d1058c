"""The packed embedded UCI HAR copy (``fedaug.data.sources.uci_har_pack``): packing then unpacking gives the
same bytes for any windows (hypothesis: shared halves, -0.0, NaN payloads, infinities), a damaged file is
refused, and the embedded copy unpacks to the official arrays (their SHA-256, recorded from the official data
before the copy was packed)."""

from __future__ import annotations

import hashlib
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.sources import uci_har
from fedaug.data.sources.uci_har import EMBEDDED_NPZ, read_arrays
from fedaug.data.sources.uci_har_pack import HALF, pack, pack_windows, unpack, unpack_windows
from fedaug.errors import DatasetError

OFFICIAL_SHA256 = {
    "X_train": "64c7ea48d7fa35aa0399fd719425a5bc1d828a24c66f372f078290410f06e300",
    "y_train": "d5a9f4b97adeb07a9f71f6bc47c98ecdc5554cf670f98b8ab722e19cfcc4aae8",
    "subject_train": "2c395e93c9183f14405c7fbca8167fa4cff788d038a352d3d5e426ed1aa58459",
    "X_test": "c04c565069949a1f68ffd5e26e3c650254b5b9c87d6ce899ac2fa1cea4db7e99",
    "y_test": "d70e696bffe8cb255e002f1cdd5125f63dff9c510609a9bb8f9c03a4a624aaa0",
    "subject_test": "f6aca869c2a54b67d93c6bdb2e12b7e3bceaab643d231a52b0ade48423f05dfb",
}
"""SHA-256 of each official array's bytes (from ``../shared/data/uci_har/uci_har_inertial.npz``)."""


@st.composite
def windows(draw: st.DrawFn) -> np.ndarray:
    """[N, 128, C] float32 whose halves are drawn from a small pool of bit patterns (so windows share halves,
    as UCI HAR's overlapping ones do), including -0.0, infinities and NaNs with payloads."""
    channels = draw(st.integers(1, 3))
    pool_size = draw(st.integers(1, 4))
    special = np.array([0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF], dtype="<u4")
    pool = []
    for _ in range(pool_size):
        bits = np.array(
            draw(st.lists(st.integers(0, 2**32 - 1), min_size=HALF * channels, max_size=HALF * channels)),
            dtype="<u4",
        )
        if draw(st.booleans()):
            bits[: len(special)] = special[: len(bits)]
        pool.append(bits.view("<f4").reshape(HALF, channels))
    picks = draw(st.lists(st.integers(0, pool_size - 1), min_size=2, max_size=12))
    count = len(picks) // 2
    return np.stack([np.concatenate([pool[picks[2 * i]], pool[picks[2 * i + 1]]]) for i in range(count)])


@settings(max_examples=40, deadline=None)
@given(windows())
def test_unpacking_gives_the_packed_bytes_back(x: np.ndarray) -> None:
    packed = pack_windows(x)
    back = unpack_windows(packed, "test")
    assert back.dtype == np.float32 and back.shape == x.shape and back.tobytes() == x.tobytes()
    assert len(packed["index"]) == len(x) and int(packed["halves_shape"][0]) <= 2 * len(x)


def test_a_window_whose_first_half_repeats_the_previous_second_half_stores_it_once() -> None:
    a, b, c = (np.full((HALF, 1), v, dtype=np.float32) for v in (1.0, 2.0, 3.0))
    x = np.stack([np.concatenate([a, b]), np.concatenate([b, c]), np.concatenate([a, c])])
    packed = pack_windows(x)
    assert packed["index"].tolist() == [[0, 1], [1, 2], [3, 4]] and packed["halves_shape"].tolist() == [
        5,
        HALF,
        1,
    ]


@pytest.mark.parametrize("damage", ["flip a byte", "drop the index", "swap two windows"])
def test_a_damaged_pack_is_refused(damage: str) -> None:
    rng = np.random.default_rng(0)
    packed = pack_windows(rng.standard_normal((4, 2 * HALF, 2)).astype(np.float32))
    if damage == "flip a byte":
        packed["halves"][2, 5] ^= 1
    elif damage == "drop the index":
        del packed["index"]
    else:
        packed["index"] = packed["index"][[1, 0, 2, 3]]
    with pytest.raises(DatasetError, match=r"SHA-256 differs|cannot unpack"):
        unpack_windows(packed, "test pack")


def test_pack_and_unpack_keep_the_other_arrays() -> None:
    rng = np.random.default_rng(1)
    arrays = {
        "X_train": rng.standard_normal((3, 2 * HALF, 9)).astype(np.float32),
        "X_test": rng.standard_normal((2, 2 * HALF, 9)).astype(np.float32),
        "y_train": np.array([1, 2, 3], dtype=np.uint8),
        "channels": np.array(["a", "b"]),
    }
    back = unpack(pack(arrays), "test")
    assert sorted(back) == sorted(arrays)
    assert all(back[k].dtype == arrays[k].dtype and back[k].tobytes() == arrays[k].tobytes() for k in arrays)


def test_the_embedded_copy_unpacks_to_the_official_arrays() -> None:
    arrays = read_arrays(EMBEDDED_NPZ)
    found = {
        k: hashlib.sha256(np.ascontiguousarray(arrays[k]).tobytes()).hexdigest() for k in OFFICIAL_SHA256
    }
    assert found == OFFICIAL_SHA256
    assert arrays["X_train"].shape == (7352, 128, 9) and arrays["X_test"].dtype == np.float32


def test_pack_uci_har_script_rewrites_the_copy_it_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "official.npz"
    rng = np.random.default_rng(2)
    arrays = {
        f"{k}_{s}": v
        for s, n in (("train", 3), ("test", 2))
        for k, v in (
            ("X", rng.standard_normal((n, 2 * HALF, 9)).astype(np.float32)),
            ("y", np.arange(1, n + 1, dtype=np.uint8)),
            ("subject", np.full(n, 1 if s == "train" else 2, dtype=np.uint8)),
        )
    }
    np.savez(source, **arrays)
    target = tmp_path / "embedded.npz"
    monkeypatch.setattr(uci_har, "EMBEDDED_NPZ", target)
    monkeypatch.setattr(sys, "argv", ["pack_uci_har.py", str(source)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(
            str(Path(__file__).resolve().parents[3] / "scripts" / "pack_uci_har.py"), run_name="__main__"
        )
    assert done.value.code == 0
    back = read_arrays(target)
    assert all(back[k].tobytes() == arrays[k].tobytes() for k in arrays)
