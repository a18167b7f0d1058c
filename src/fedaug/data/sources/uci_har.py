"""UCI HAR: human activity recognition from smartphone inertial signals (the embedded default dataset).

Data: 50 Hz windows of 2.56 s (128 readings) from a waist-worn Samsung Galaxy S II, 30 subjects, 6 classes
(WALKING, WALKING_UPSTAIRS, WALKING_DOWNSTAIRS, SITTING, STANDING, LAYING; labels 0..5). Official subject-wise
split: 7352 train windows (21 subjects) / 2947 test windows (9 subjects).

Output: ``x`` is ``[N, 1, 128, channels]`` float32 (time on the H axis, sensor axes on the W axis, as the
papers' HARNet expects). ``channels=3`` keeps body_acc x/y/z (the papers' default); ``channels=9`` keeps all
nine in the order body_acc xyz, body_gyro xyz, total_acc xyz. No normalisation by default, as in the official
FLea code; ``normalize=True`` standardises each channel with the train mean/std. ``extras`` holds
``subject_train`` / ``subject_test`` (1..30), handy for natural by-subject federated splits.

Where it is read from (first found): ``<data_dir>/uci_har/uci_har_inertial.npz`` (the project's layout), the
original ``<data_dir>/uci_har/UCI HAR Dataset/{train,test}/Inertial Signals/*.txt``, the official zip in
``<data_dir>/uci_har/`` (also the newer UCI zip that nests ``UCI HAR Dataset.zip``), and finally the copy
embedded in the package (``fedaug/data/embedded``, packed to half the size and unpacked bit for bit:
:mod:`fedaug.data.sources.uci_har_pack`), so the dataset works on a fresh offline clone.
With ``download=True`` and no local copy, the official zip is fetched from :data:`OFFICIAL_URL`. UCI publishes
no checksum for it, so the download is verified by content (shapes, labels 1..6, disjoint subjects).

License and citation: CC BY 4.0 per UCI; the original README forbids commercial use and asks to cite
D. Anguita, A. Ghio, L. Oneto, X. Parra, J. L. Reyes-Ortiz, "A Public Domain Dataset for Human Activity
Recognition Using Smartphones", ESANN 2013. See ``fedaug/data/embedded/LICENSE-UCI-HAR.txt``.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.cache import load_or_build
from fedaug.data.download import RemoteFile, download_file
from fedaug.data.sources.uci_har_pack import is_packed, unpack
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import check_bool, check_choice

logger = logging.getLogger(__name__)

NPZ_NAME = "uci_har_inertial.npz"
EMBEDDED_NPZ = Path(__file__).resolve().parents[1] / "embedded" / NPZ_NAME
OFFICIAL_DIR = "UCI HAR Dataset"
OFFICIAL_URL = (
    "https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip"
)
CHANNEL_NAMES = tuple(f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz")
ACTIVITIES = ("WALKING", "WALKING_UPSTAIRS", "WALKING_DOWNSTAIRS", "SITTING", "STANDING", "LAYING")
ARRAY_KEYS = ("X_train", "y_train", "subject_train", "X_test", "y_test", "subject_test")

Arrays = dict[str, np.ndarray]


def _read_npz(path: Path) -> Arrays:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DatasetError(f"cannot read UCI HAR file {path}: {exc}") from exc
    if is_packed(arrays):  # the embedded copy's form (uci_har_pack)
        arrays = unpack(arrays, str(path))
    missing = [k for k in ARRAY_KEYS if k not in arrays]
    if missing:
        raise DatasetError(f"UCI HAR file {path} lacks arrays {missing}; expected keys {list(ARRAY_KEYS)}")
    return arrays


def read_arrays(path: Path) -> Arrays:
    """The official arrays from an ``.npz`` (plain or packed), the official zip or the extracted folder."""
    return _read_npz(path) if path.suffix == ".npz" else read_official(path)


def _parse_official(read: Callable[[str], bytes]) -> Arrays:
    """Parses the original text layout; ``read(relative_path)`` returns a file's bytes."""
    arrays: Arrays = {}
    for split in ("train", "test"):
        signals = [
            np.loadtxt(
                io.BytesIO(read(f"{split}/Inertial Signals/{name}_{split}.txt")), dtype=np.float32, ndmin=2
            )
            for name in CHANNEL_NAMES
        ]
        arrays[f"X_{split}"] = np.stack(signals, axis=-1)
        arrays[f"y_{split}"] = np.loadtxt(io.BytesIO(read(f"{split}/y_{split}.txt")), dtype=np.uint8, ndmin=1)
        subjects = np.loadtxt(io.BytesIO(read(f"{split}/subject_{split}.txt")), dtype=np.uint8, ndmin=1)
        arrays[f"subject_{split}"] = subjects
    return arrays


def _official_reader(location: Path) -> tuple[Callable[[str], bytes], Callable[[], None]]:
    """A reader of relative paths in an extracted folder or a (possibly nested) official zip, and a closer."""
    if location.is_dir():
        return (lambda rel: (location / rel).read_bytes()), (lambda: None)
    outer = zipfile.ZipFile(location)
    nested = next((n for n in outer.namelist() if n.endswith(f"{OFFICIAL_DIR}.zip")), None)
    archive = zipfile.ZipFile(io.BytesIO(outer.read(nested))) if nested else outer
    anchor = next(n for n in archive.namelist() if n.endswith("train/y_train.txt") and "__MACOSX" not in n)
    prefix = anchor[: -len("train/y_train.txt")]
    return (lambda rel: archive.read(prefix + rel)), outer.close


def read_official(location: Path) -> Arrays:
    """Reads the original ``UCI HAR Dataset`` folder or zip into the npz-style arrays (and checks them)."""
    try:
        read, close = _official_reader(location)
        try:
            arrays = _parse_official(read)
        finally:
            close()
    except (OSError, KeyError, ValueError, StopIteration, zipfile.BadZipFile) as exc:
        raise DatasetError(
            f"cannot read the original UCI HAR layout at {location}: {exc}; expected "
            f"'{OFFICIAL_DIR}/{{train,test}}/Inertial Signals/<channel>_<split>.txt', "
            "y_<split>.txt and subject_<split>.txt"
        ) from exc
    _validate(arrays, str(location))
    return arrays


def _validate(arrays: Arrays, origin: str) -> None:
    for split in ("train", "test"):
        x, y, s = arrays[f"X_{split}"], arrays[f"y_{split}"], arrays[f"subject_{split}"]
        if x.ndim != 3 or x.shape[1:] != (128, 9) or len(y) != len(x) or len(s) != len(x):
            raise DatasetError(
                f"UCI HAR {split} arrays from {origin} have shapes {x.shape}/{y.shape}/{s.shape}"
            )
        if len(y) and (y.min() < 1 or y.max() > 6):
            raise DatasetError(f"UCI HAR {split} labels from {origin} are outside 1..6")
    if set(arrays["subject_train"].tolist()) & set(arrays["subject_test"].tolist()):
        raise DatasetError(f"UCI HAR train and test subjects from {origin} overlap")


def _check_download(path: Path) -> None:
    """Content check of a downloaded official zip (UCI publishes no checksum)."""
    read_official(path)


def _load_official_cached(ctx: LoadContext, location: Path) -> Arrays:
    files = sorted(location.rglob("*.txt")) if location.is_dir() else [location]
    return load_or_build(
        ctx.cache_dir,
        "uci_har_official",
        params={"format": "uci-har-inertial-txt", "version": 1},
        sources=files,
        build=lambda: read_official(location),
    )


def _find_arrays(ctx: LoadContext) -> tuple[Arrays, str]:
    root = ctx.data_dir / "uci_har"
    if (root / NPZ_NAME).exists():
        return _read_npz(root / NPZ_NAME), f"{root / NPZ_NAME}"
    if (root / OFFICIAL_DIR / "train").is_dir():
        return _load_official_cached(
            ctx, root / OFFICIAL_DIR
        ), f"original text files in {root / OFFICIAL_DIR}"
    zips = sorted(root.glob("*.zip")) if root.is_dir() else []
    if not zips and ctx.download:
        remote = RemoteFile(OFFICIAL_URL.rsplit("/", 1)[1], (OFFICIAL_URL,), checksum=None)
        zips = [download_file(remote, root, validate=_check_download)]
    if zips:
        return _load_official_cached(ctx, zips[0]), f"official zip {zips[0]}"
    if not EMBEDDED_NPZ.exists():
        raise ctx.missing([NPZ_NAME, f"'{OFFICIAL_DIR}/' or its zip"], [root, EMBEDDED_NPZ.parent])
    return _read_npz(EMBEDDED_NPZ), f"embedded copy {EMBEDDED_NPZ.name} (no copy in {root})"


def _standardize_channels(
    x_train: torch.Tensor, x_test: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[float, ...], tuple[float, ...]]:
    """Per-channel (last axis) standardisation with train statistics."""
    flat = x_train.reshape(-1, x_train.shape[-1])
    mean, std = flat.mean(dim=0), flat.std(dim=0).clamp_min(1e-8)
    return (x_train - mean) / std, (x_test - mean) / std, tuple(mean.tolist()), tuple(std.tolist())


@register(
    "dataset",
    "uci_har",
    shape="[1,128,3] or [1,128,9]",
    size="7352 / 2947",
    classes="6",
    source="UCI (Anguita et al., ESANN 2013), embedded",
    license="CC BY 4.0, no commercial use",
)
def load_uci_har(ctx: LoadContext, *, channels: int = 3, normalize: bool = False) -> Dataset:
    """Loads UCI HAR inertial windows as ``[N, 1, 128, channels]`` (see the module docstring).

    Args:
        ctx: where to look.
        channels: 3 (body_acc x/y/z, the papers' HARNet input) or 9 (all inertial channels).
        normalize: standardise each channel with the train mean/std (default False, like the official code).
    """
    check_choice(option_key("uci_har", "channels"), channels, (3, 9))
    check_bool(option_key("uci_har", "normalize"), normalize)
    arrays, origin = _find_arrays(ctx)
    _validate(arrays, origin)
    x_train = torch.from_numpy(
        np.ascontiguousarray(arrays["X_train"][:, None, :, :channels], dtype=np.float32)
    )
    x_test = torch.from_numpy(np.ascontiguousarray(arrays["X_test"][:, None, :, :channels], dtype=np.float32))
    mean = std = None
    if normalize:
        x_train, x_test, mean, std = _standardize_channels(x_train, x_test)
    names = [str(n) for n in arrays.get("activity_labels", np.array(ACTIVITIES))]
    return Dataset(
        name="uci_har",
        x_train=x_train,
        y_train=torch.from_numpy(arrays["y_train"].astype(np.int64) - 1),
        x_test=x_test,
        y_test=torch.from_numpy(arrays["y_test"].astype(np.int64) - 1),
        num_classes=6,
        class_names=names,
        input_shape=(1, 128, channels),
        source=f"UCI HAR inertial signals ({', '.join(CHANNEL_NAMES[:channels])}) from {origin}",
        mean=mean,
        std=std,
        norm_axis=2,
        modality="signal",
        extras={
            "subject_train": torch.from_numpy(arrays["subject_train"].astype(np.int64)),
            "subject_test": torch.from_numpy(arrays["subject_test"].astype(np.int64)),
        },
    )
