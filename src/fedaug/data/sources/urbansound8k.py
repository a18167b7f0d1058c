"""UrbanSound8K: 8732 labelled urban sound clips (<= 4 s) in 10 classes, 10 predefined folds.

Classes: air_conditioner, car_horn, children_playing, dog_bark, drilling, engine_idling, gun_shot, jackhammer,
siren, street_music (classID 0..9 from the metadata CSV).

Variants:
    ``audio`` (default): the real audio ``<data_dir>/urbansound8k/UrbanSound8K/audio/fold1..10/*.wav`` with
        ``metadata/UrbanSound8K.csv``, through the papers' pipeline (:mod:`fedaug.data.audio`): resample to
        44.1 kHz, 2 channels, pad at the end / truncate to ``(44100 // 1000) * 4000 = 176000`` samples (the
        official code's length; a true 4 s would be 176400 samples and 345 frames), mel spectrogram (n_fft
        1024, hop 512, 64 mels) in dB (top_db 80) -> ``[2, 64, 344]``, no further normalisation. The official
        code's random pad position, time shift and SpecAugment are augmentations and are not applied here. The
        spectrograms (about 1.5 GB) are cached under ``cache_dir``. ``download=True`` fetches the 6 GB archive
        from Zenodo (md5 ``9aa69802bbf37fb986f71ec1483a196e``) and extracts it.
    ``mfcc40``: per-clip 40-dim mean MFCC vectors ``<data_dir>/urbansound8k_mfcc40/us8k_mfcc40_mean.npz``
        (keys ``X, classID, fold, fsID, slice_file_name, class_names``), shape ``[40]``, standardised per
        feature with the train split's mean/std. Works offline; a spectrogram model such as AudioNet cannot
        use it.

Splits: ``split="folds"`` (default) uses the official folds, fold ``test_fold`` (default 10) as test and the
other nine as train (the authors ask results to be reported per fold). ``split="paper"`` is the FLea code's
seeded random 80/20 split of all clips (train 6986 / test 1746; ``seed`` default 1); clips cut from the same
Freesound recording can then land on both sides. ``extras`` holds ``fold_*`` and ``fsid_*`` per sample.

License and citation: CC BY-NC 3.0 (non-commercial). J. Salamon, C. Jacoby, J. P. Bello, "A Dataset and
Taxonomy for Urban Sound Research", ACM Multimedia 2014.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from fedaug.data.audio import SpectrogramConfig
from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.download import RemoteFile, download_file, extract_archive, verify_checksum
from fedaug.data.sources.audio_common import cached_log_mel, make_config
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import check_choice, check_int

logger = logging.getLogger(__name__)

ARCHIVE = RemoteFile(
    "UrbanSound8K.tar.gz",
    ("https://zenodo.org/records/1203745/files/UrbanSound8K.tar.gz?download=1",),
    checksum="9aa69802bbf37fb986f71ec1483a196e",
)
MFCC_NPZ = "us8k_mfcc40_mean.npz"
TEST_FRACTION = 0.2
Arrays = dict[str, np.ndarray]


def read_metadata(csv_path: Path) -> tuple[list[dict[str, str]], list[str]]:
    """Rows of ``UrbanSound8K.csv`` and the class names ordered by classID."""
    try:
        with open(csv_path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        names = {int(row["classID"]): row["class"] for row in rows}
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"cannot read UrbanSound8K metadata {csv_path}: {exc}") from exc
    if sorted(names) != list(range(10)):
        raise DatasetError(f"{csv_path} has classIDs {sorted(names)}, expected 0..9")
    return rows, [names[i] for i in range(10)]


def _audio_root(ctx: LoadContext) -> Path:
    base = ctx.data_dir / "urbansound8k"
    root = base / "UrbanSound8K"
    if (root / "metadata" / "UrbanSound8K.csv").exists():
        return root
    archive = base / ARCHIVE.filename
    if archive.exists() or ctx.download:
        if archive.exists():
            verify_checksum(archive, ARCHIVE.checksum or "", algorithm="md5")
        else:
            archive = download_file(ARCHIVE, base, timeout=300.0)
        extract_archive(archive, base)
        return root
    hint = ""
    if (ctx.data_dir / "urbansound8k_mfcc40" / MFCC_NPZ).exists():
        hint = "The 40-dim mean-MFCC features are available offline: pass variant='mfcc40'."
    raise ctx.missing(
        ["UrbanSound8K/metadata/UrbanSound8K.csv", "UrbanSound8K/audio/fold1..10/*.wav", ARCHIVE.filename],
        [base],
        hint=hint or "Without the audio, variant='mfcc40' uses the precomputed MFCC features.",
    )


def _audio_arrays(ctx: LoadContext, config: SpectrogramConfig) -> tuple[Arrays, list[str], str]:
    root = _audio_root(ctx)
    csv_path = root / "metadata" / "UrbanSound8K.csv"
    rows, class_names = read_metadata(csv_path)
    paths = [root / "audio" / f"fold{row['fold']}" / row["slice_file_name"] for row in rows]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise DatasetError(
            f"{len(missing)} UrbanSound8K clips listed in {csv_path} are missing, e.g. {missing[:3]}"
        )

    def clips() -> tuple[int, Iterator[tuple[str, bytes]]]:
        return len(paths), ((str(p), p.read_bytes()) for p in paths)

    def extra() -> Arrays:
        return {
            "label": np.array([int(r["classID"]) for r in rows], dtype=np.int64),
            "fold": np.array([int(r["fold"]) for r in rows], dtype=np.int64),
            "fsid": np.array([int(r["fsID"]) for r in rows], dtype=np.int64),
        }

    arrays = cached_log_mel(
        cache_dir=ctx.cache_dir,
        namespace="urbansound8k",
        config=config,
        sources=[csv_path, *paths],
        clips=clips,
        extra=extra,
    )
    return arrays, class_names, f"UrbanSound8K audio from {root}, log-mel {config.as_dict()}"


def _mfcc_arrays(ctx: LoadContext) -> tuple[Arrays, list[str], str]:
    folder = ctx.data_dir / "urbansound8k_mfcc40"
    path = folder / MFCC_NPZ
    if not path.exists():
        raise ctx.missing(
            [MFCC_NPZ, "UrbanSound8K.csv"], [folder], hint="These derived features cannot be downloaded."
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {
                "x": npz["X"].astype(np.float32),
                "label": npz["classID"].astype(np.int64),
                "fold": npz["fold"].astype(np.int64),
                "fsid": npz["fsID"].astype(np.int64),
            }
            class_names = [str(n) for n in npz["class_names"]]
            file_names = [str(n) for n in npz["slice_file_name"]]
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"cannot read UrbanSound8K MFCC file {path}: {exc}") from exc
    if arrays["x"].ndim != 2 or arrays["x"].shape[1] != 40 or len(arrays["label"]) != len(arrays["x"]):
        raise DatasetError(f"{path}: X has shape {arrays['x'].shape}, expected [N, 40] with N labels")
    if (folder / "UrbanSound8K.csv").exists():
        _check_against_csv(arrays, file_names, folder / "UrbanSound8K.csv")
    return arrays, class_names, f"UrbanSound8K 40-dim mean-MFCC features from {path}"


def _check_against_csv(arrays: Arrays, file_names: list[str], csv_path: Path) -> None:
    rows, _ = read_metadata(csv_path)
    by_name = {row["slice_file_name"]: (int(row["classID"]), int(row["fold"])) for row in rows}
    for name, label, fold in zip(file_names, arrays["label"], arrays["fold"], strict=True):
        if by_name.get(name) != (int(label), int(fold)):
            raise DatasetError(f"MFCC features disagree with {csv_path} for clip {name}")


def _split(arrays: Arrays, split: str, test_fold: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and test indices."""
    count = len(arrays["label"])
    if split == "folds":
        test = arrays["fold"] == test_fold
        return torch.from_numpy(np.flatnonzero(~test)), torch.from_numpy(np.flatnonzero(test))
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    num_test = int(count * TEST_FRACTION)
    return perm[: count - num_test], perm[count - num_test :]


def _standardize(
    x_train: torch.Tensor, x_test: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[float, ...], tuple[float, ...]]:
    mean = x_train.mean(dim=0)
    std = x_train.std(dim=0).clamp_min(1e-8)
    return (x_train - mean) / std, (x_test - mean) / std, tuple(mean.tolist()), tuple(std.tolist())


@register(
    "dataset",
    "urbansound8k",
    shape="[2,64,344] or [40]",
    size="8732 clips, 10 folds",
    classes="10",
    source="Zenodo (Salamon et al., ACM MM 2014)",
    license="CC BY-NC 3.0",
)
def load_urbansound8k(
    ctx: LoadContext,
    *,
    variant: str = "audio",
    split: str = "folds",
    test_fold: int = 10,
    seed: int = 1,
    sample_rate: int = 44100,
    channels: int = 2,
    duration_ms: int = 4000,
    n_fft: int = 1024,
    hop_length: int = 512,
    n_mels: int = 64,
    top_db: float | None = 80.0,
) -> Dataset:
    """Loads UrbanSound8K (see the module docstring); default ``[N, 2, 64, 344]`` dB mel spectrograms.

    Args:
        ctx: where to look.
        variant: ``"audio"`` (spectrograms of the real audio) or ``"mfcc40"`` (offline mean-MFCC features).
        split: ``"folds"`` (official folds, ``test_fold`` is test) or ``"paper"`` (seeded random 80/20).
        test_fold: the test fold (1..10) for ``split="folds"``.
        seed: seed of the ``split="paper"`` permutation.
        sample_rate, channels, duration_ms, n_fft, hop_length, n_mels, top_db: the audio pipeline.
    """
    check_choice(option_key("urbansound8k", "variant"), variant, ("audio", "mfcc40"))
    check_choice(option_key("urbansound8k", "split"), split, ("folds", "paper"))
    check_choice(option_key("urbansound8k", "test_fold"), test_fold, tuple(range(1, 11)))
    check_int(option_key("urbansound8k", "seed"), seed, 0)
    config = make_config(
        "urbansound8k", sample_rate, channels, duration_ms, n_fft, hop_length, n_mels, top_db
    )
    if variant == "audio":
        arrays, class_names, source = _audio_arrays(ctx, config)
    else:
        arrays, class_names, source = _mfcc_arrays(ctx)
    train_idx, test_idx = _split(arrays, split, test_fold, seed)
    split_text = f"fold {test_fold} as test" if split == "folds" else f"random 80/20 (seed {seed})"
    source = f"{source}; split: {split_text}"
    return _to_dataset(arrays, class_names, source, train_idx, test_idx, standardize=variant == "mfcc40")


def _to_dataset(
    arrays: Arrays,
    class_names: list[str],
    source: str,
    train_idx: torch.Tensor,
    test_idx: torch.Tensor,
    *,
    standardize: bool,
) -> Dataset:
    x, labels = torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["label"])
    x_train, x_test = x[train_idx], x[test_idx]
    mean = std = None
    if standardize:
        x_train, x_test, mean, std = _standardize(x_train, x_test)
    fold, fsid = torch.from_numpy(arrays["fold"]), torch.from_numpy(arrays["fsid"])
    return Dataset(
        name="urbansound8k",
        x_train=x_train,
        y_train=labels[train_idx],
        x_test=x_test,
        y_test=labels[test_idx],
        num_classes=10,
        class_names=class_names,
        input_shape=tuple(x.shape[1:]),
        source=source,
        mean=mean,
        std=std,
        modality="audio",
        extras={
            "fold_train": fold[train_idx],
            "fold_test": fold[test_idx],
            "fsid_train": fsid[train_idx],
            "fsid_test": fsid[test_idx],
        },
    )
