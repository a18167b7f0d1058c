"""Writes the embedded UCI HAR copy (``src/fedaug/data/embedded/uci_har_inertial.npz``) in its packed form
(:mod:`fedaug.data.sources.uci_har_pack`) from the official arrays: an unpacked ``uci_har_inertial.npz``
(``../shared/data/uci_har``), the official zip or the extracted ``UCI HAR Dataset`` folder. It checks that the
file it wrote loads back to exactly those arrays.

    python scripts/pack_uci_har.py ../shared/data/uci_har/uci_har_inertial.npz
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fedaug.data.sources.uci_har import EMBEDDED_NPZ, read_arrays
from fedaug.data.sources.uci_har_pack import pack


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    source = Path(argv[0])
    arrays = read_arrays(source)
    before = EMBEDDED_NPZ.stat().st_size if EMBEDDED_NPZ.exists() else 0
    with open(EMBEDDED_NPZ, "wb") as handle:
        np.savez_compressed(handle, **pack(arrays))  # type: ignore[arg-type]
    back = read_arrays(EMBEDDED_NPZ)
    assert sorted(back) == sorted(arrays) and all(np.array_equal(back[k], arrays[k]) for k in arrays)
    assert all(back[k].dtype == arrays[k].dtype for k in arrays)
    print(f"{EMBEDDED_NPZ}: {before / 2**20:.1f} MiB -> {EMBEDDED_NPZ.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
