"""Free Spoken Digit Dataset (FSDD): spoken digits 0-9 as log-mel spectrograms, the offline audio stand-in for
UrbanSound8K (same pipeline code, see :mod:`fedaug.data.audio`).

Data: 3000 mono 8 kHz 16-bit WAV recordings ``recordings/{digit}_{speaker}_{index}.wav``, 6 speakers x 10
digits x 50 repetitions (index 0..49), mostly shorter than 1 s. Split (customary): index 0-4 of every
digit/speaker pair is test (300), the rest train (2700). Classes ``"0".."9"``. ``extras`` holds
``speaker_train`` / ``speaker_test`` (index into the sorted speaker names) for by-speaker federated splits.

Default pipeline, chosen for short 8 kHz clips: keep 8 kHz, 1 s (8000 samples; 99% of clips are shorter, so
they are zero-padded at the end, the rest truncated), 2 channels (mono duplicated, so the paper's 2-channel
AudioNet runs unchanged), n_fft 512 (64 ms window, 15.6 Hz bins, so every one of the 64 HTK mel filters
covers at least one FFT bin), hop 128 (16 ms), 64 mels, dB with top_db 80 -> ``[2, 64, 63]``. All are options.
No further normalisation (as for UrbanSound8K in the paper). Spectrograms are cached under ``cache_dir``.

Sources (first found): ``<data_dir>/fsdd/recordings/*.wav``, or an archive in ``<data_dir>/fsdd/``
(``*.tar.xz``, ``*.tar.gz`` or ``*.zip`` holding ``.../recordings/*.wav``, such as the project's
``fsdd_recordings_26eb9aa.tar.xz``). ``download=True`` fetches the GitHub archive of the pinned revision
:data:`FSDD_REVISION`. The project publishes no checksum for that archive (GitHub re-compresses archives), so
it is verified by content: :data:`RECORDINGS_SHA256` hashes the sorted ``(file name, sha256 of the file)``
pairs of the 3000 recordings of that revision. A local copy with a different digest (another revision) only
logs a warning.

License and citation: CC BY-SA 4.0. Z. Jackson, C. Souza, J. Flaks, Y. Pan, H. Nicolas, A. Thite,
"Jakobovski/free-spoken-digit-dataset", https://github.com/Jakobovski/free-spoken-digit-dataset.
"""

from __future__ import annotations

import hashlib
import logging
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from fedaug.data.audio import SpectrogramConfig
from fedaug.data.base import Dataset, LoadContext
from fedaug.data.download import RemoteFile, download_file
from fedaug.data.sources.audio_common import cached_log_mel, make_config
from fedaug.errors import DatasetError
from fedaug.registry import register

logger = logging.getLogger(__name__)

FSDD_REVISION = "26eb9aaf76e81b692f806f9140c2d2777410d7a1"
FSDD_URL = f"https://codeload.github.com/Jakobovski/free-spoken-digit-dataset/tar.gz/{FSDD_REVISION}"
RECORDINGS_SHA256 = "a2e8a660492f28d9eed6270b290d26cbc5c81d6077ce87d3c0ad5adf4d4ee696"
ARCHIVE_PATTERNS = ("*.tar.xz", "*.tar.gz", "*.tgz", "*.zip")
TEST_INDICES = range(5)


def _parse_name(name: str) -> tuple[int, str, int] | None:
    """``(digit, speaker, index)`` of ``{digit}_{speaker}_{index}.wav``, None for other names."""
    parts = name.removesuffix(".wav").split("_")
    if not name.endswith(".wav") or len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[0]), parts[1], int(parts[2])


def iter_recordings(source: Path) -> Iterator[tuple[str, bytes]]:
    """Yields ``(file name, bytes)`` of each ``recordings/*.wav`` of a folder or archive (stored order)."""
    try:
        if source.is_dir():
            for path in sorted(source.glob("*.wav")):
                yield path.name, path.read_bytes()
        elif zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as zf:
                for info in zf.infolist():
                    if PurePosixPath(info.filename).parent.name == "recordings" and info.filename.endswith(
                        ".wav"
                    ):
                        yield PurePosixPath(info.filename).name, zf.read(info)
        else:
            with tarfile.open(source, "r:*") as tf:
                for member in tf:
                    member_path = PurePosixPath(member.name)
                    handle = tf.extractfile(member) if member.isfile() else None
                    if handle and member_path.parent.name == "recordings" and member_path.suffix == ".wav":
                        yield member_path.name, handle.read()
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, zlib.error) as exc:
        raise DatasetError(f"cannot read FSDD recordings from {source}: {exc}") from exc


def read_recordings(source: Path) -> dict[str, bytes]:
    """All recordings of ``source`` keyed by file name (sorted), checked for naming and count."""
    files = {name: data for name, data in iter_recordings(source) if _parse_name(name) is not None}
    if not files:
        raise DatasetError(
            f"{source} holds no FSDD recordings named recordings/{{digit}}_{{speaker}}_{{index}}.wav"
        )
    return dict(sorted(files.items()))


def recordings_digest(files: dict[str, bytes]) -> str:
    """sha256 over the sorted ``(name, sha256(bytes))`` pairs: names a revision, whatever the packaging."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def _validate_download(path: Path) -> None:
    actual = recordings_digest(read_recordings(path))
    if actual != RECORDINGS_SHA256:
        raise DatasetError(
            f"downloaded FSDD archive {path} has recordings digest {actual}, expected {RECORDINGS_SHA256}"
        )


def _find_source(ctx: LoadContext) -> Path:
    root = ctx.data_dir / "fsdd"
    if any((root / "recordings").glob("*.wav")):
        return root / "recordings"
    archives = sorted(p for pattern in ARCHIVE_PATTERNS for p in root.glob(pattern)) if root.is_dir() else []
    if archives:
        return archives[0]
    if ctx.download:
        remote = RemoteFile(
            f"free-spoken-digit-dataset-{FSDD_REVISION[:7]}.tar.gz", (FSDD_URL,), checksum=None
        )
        return download_file(remote, root, validate=_validate_download)
    raise ctx.missing(
        ["recordings/*.wav", "an archive " + " / ".join(ARCHIVE_PATTERNS) + " with recordings/"], [root]
    )


def _metadata(names: list[str]) -> dict[str, np.ndarray]:
    parsed = [_parse_name(name) for name in names]
    speakers = sorted({p[1] for p in parsed if p is not None})
    return {
        "digit": np.array([p[0] for p in parsed if p is not None], dtype=np.int64),
        "speaker": np.array([speakers.index(p[1]) for p in parsed if p is not None], dtype=np.int64),
        "index": np.array([p[2] for p in parsed if p is not None], dtype=np.int64),
        "speaker_names": np.array(speakers),
    }


def _compute(ctx: LoadContext, source: Path, config: SpectrogramConfig) -> dict[str, np.ndarray]:
    files_for_signature = sorted(source.glob("*.wav")) if source.is_dir() else [source]
    cache: dict[str, dict[str, bytes]] = {}

    def files() -> dict[str, bytes]:
        if "files" not in cache:
            cache["files"] = read_recordings(source)
            digest = recordings_digest(cache["files"])
            if digest != RECORDINGS_SHA256:
                logger.warning(
                    "FSDD recordings in %s differ from revision %s (digest %s)",
                    source,
                    FSDD_REVISION[:7],
                    digest,
                )
        return cache["files"]

    return cached_log_mel(
        cache_dir=ctx.cache_dir,
        namespace="fsdd",
        config=config,
        sources=files_for_signature,
        clips=lambda: (len(files()), files().items()),
        extra=lambda: _metadata(list(files())),
    )


@register(
    "dataset",
    "fsdd",
    shape="[2,64,63]",
    size="2700 / 300",
    classes="10",
    source="Free Spoken Digit Dataset (Jackson et al., GitHub)",
    license="CC BY-SA 4.0",
)
def load_fsdd(
    ctx: LoadContext,
    *,
    sample_rate: int = 8000,
    channels: int = 2,
    duration_ms: int = 1000,
    n_fft: int = 512,
    hop_length: int = 128,
    n_mels: int = 64,
    top_db: float | None = 80.0,
) -> Dataset:
    """Loads FSDD as dB mel spectrograms ``[N, channels, n_mels, frames]`` (default ``[2, 64, 63]``).

    Args:
        ctx: where to look.
        sample_rate: rate the clips are resampled to (Hz).
        channels: output channels (mono is duplicated).
        duration_ms: clip length; ``(sample_rate // 1000) * duration_ms`` samples, zero-padded at the end.
        n_fft: FFT/window size.
        hop_length: hop between frames.
        n_mels: mel bands.
        top_db: dB dynamic range per spectrogram (None keeps all).
    """
    config = make_config("fsdd", sample_rate, channels, duration_ms, n_fft, hop_length, n_mels, top_db)
    source = _find_source(ctx)
    arrays = _compute(ctx, source, config)
    description = (
        f"FSDD recordings from {source}; test = recording index 0-4 of every digit/speaker pair; "
        f"log-mel {config.as_dict()}"
    )
    return _to_dataset(arrays, config, description)


def _to_dataset(arrays: dict[str, np.ndarray], config: SpectrogramConfig, source: str) -> Dataset:
    test = np.isin(arrays["index"], list(TEST_INDICES))
    x = torch.from_numpy(arrays["x"])
    labels = torch.from_numpy(arrays["digit"])
    speaker = torch.from_numpy(arrays["speaker"])
    train_idx, test_idx = torch.from_numpy(np.flatnonzero(~test)), torch.from_numpy(np.flatnonzero(test))
    return Dataset(
        name="fsdd",
        x_train=x[train_idx],
        y_train=labels[train_idx],
        x_test=x[test_idx],
        y_test=labels[test_idx],
        num_classes=10,
        class_names=[str(d) for d in range(10)],
        input_shape=config.output_shape,
        source=source,
        extras={"speaker_train": speaker[train_idx], "speaker_test": speaker[test_idx]},
        modality="audio",
    )
