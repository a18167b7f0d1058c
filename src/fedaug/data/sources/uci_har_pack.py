"""The embedded UCI HAR copy, packed: the same arrays in fewer bytes, unpacked bit for bit.

UCI HAR's windows overlap by half (128 readings, a new window every 64): in the official data the first half
of a window is, for 92% of windows, exactly the second half of the window before it. The packed file stores
each distinct half once (``X_<split>_halves``) and, per window, the indices of its two halves
(``X_<split>_index``, ``[N, 2]``). Each channel's readings in a half are stored as the differences of their
float32 bit patterns from the previous reading's (unsigned 32-bit integers, modulo 2**32: exact both ways), in
four byte planes (every value's first byte, then every second byte, ...), which deflate compresses better
than interleaved floats. Unpacking sums the differences back, gathers the halves and checks the result
against the SHA-256 of the original array stored beside it (``X_<split>_sha256``), so a damaged or mispacked
file is refused, never read differently. The official arrays take 23.2 MiB as a plain ``.npz``, 19.7 MiB
packed; unpacking adds about 0.2 s to a load.

The other arrays (labels, subjects, names) are stored as they are. :func:`pack` is what
``scripts/pack_uci_har.py`` runs on the official arrays; :func:`unpack` is what the loader runs on a file that
holds ``X_train_halves``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fedaug.errors import DatasetError

HALF = 64
"""Readings per half window (the official windows are 128 readings with a 50% overlap)."""
SPLITS = ("train", "test")


def is_packed(arrays: dict[str, np.ndarray]) -> bool:
    return "X_train_halves" in arrays


def _digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype="<f4").tobytes()).hexdigest()


def pack_windows(x: np.ndarray) -> dict[str, np.ndarray]:
    """``x`` ``[N, 128, C]`` float32 as distinct halves (byte planes ``[4, M * 64 * C]``), the halves'
    shape, the window -> halves index ``[N, 2]`` and the original's SHA-256."""
    if x.ndim != 3 or x.shape[1] != 2 * HALF or x.dtype != np.float32:
        raise ValueError(f"expected float32 windows [N, {2 * HALF}, C], got {x.dtype} {x.shape}")
    halves: list[np.ndarray] = []
    index = np.empty((len(x), 2), dtype=np.int32)
    for i, window in enumerate(x):
        first, second = window[:HALF], window[HALF:]
        if i and first.tobytes() == halves[-1].tobytes():
            index[i, 0] = len(halves) - 1  # the previous window's second half, bit for bit
        else:
            index[i, 0] = len(halves)
            halves.append(first)
        index[i, 1] = len(halves)
        halves.append(second)
    stacked = np.ascontiguousarray(np.stack(halves), dtype="<f4")
    bits = np.ascontiguousarray(stacked.view("<u4").transpose(0, 2, 1))  # [M, C, 64]: each channel's run
    delta = bits.copy()
    delta[..., 1:] -= bits[..., :-1]  # modulo 2**32: each reading's bits minus the previous reading's
    planes = np.ascontiguousarray(delta.view(np.uint8).reshape(-1, 4).T)
    return {
        "halves": planes,
        "halves_shape": np.array(stacked.shape, dtype=np.int64),
        "index": index,
        "sha256": np.array(_digest(x)),
    }


def unpack_windows(packed: dict[str, np.ndarray], where: str) -> np.ndarray:
    """The windows ``[N, 128, C]`` float32 of :func:`pack_windows`' output; DatasetError if they do not hash
    to the stored SHA-256."""
    try:
        count, length, channels = (int(n) for n in packed["halves_shape"])
        delta = np.ascontiguousarray(packed["halves"].T).view("<u4").reshape(count, channels, length)
        bits = np.cumsum(delta, axis=-1, dtype="<u4")  # the readings' bits again (sums wrap at 2**32)
        halves = np.ascontiguousarray(bits.transpose(0, 2, 1)).view("<f4")
        index = packed["index"]
        x = halves[index].reshape(len(index), 2 * length, channels)  # [N, 2, 64, C]: both halves in order
    except (KeyError, ValueError, IndexError, TypeError) as exc:
        raise DatasetError(f"cannot unpack {where}: {exc}") from exc
    if _digest(x) != str(packed["sha256"]):
        raise DatasetError(f"{where} does not unpack to the windows it was packed from (SHA-256 differs)")
    windows: np.ndarray = x.astype(np.float32, copy=False)
    return windows


def pack(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The packed form of the official arrays (``X_<split>`` packed, everything else as it is)."""
    packed = {k: v for k, v in arrays.items() if not k.startswith("X_")}
    for split in SPLITS:
        for key, value in pack_windows(arrays[f"X_{split}"]).items():
            packed[f"X_{split}_{key}"] = value
    return packed


def unpack(packed: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """The official arrays of a packed file (``where``: its name, for errors)."""
    arrays = {k: v for k, v in packed.items() if not k.startswith("X_")}
    for split in SPLITS:
        prefix = f"X_{split}_"
        part = {k[len(prefix) :]: v for k, v in packed.items() if k.startswith(prefix)}
        arrays[f"X_{split}"] = unpack_windows(part, f"{where} ({split})")
    return arrays
