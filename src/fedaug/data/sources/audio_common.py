"""Shared pieces of the audio loaders (``fsdd``, ``urbansound8k``): option validation into a
:class:`~fedaug.data.audio.SpectrogramConfig` and the cached computation of log-mel spectrograms.

Spectrogram caches live under ``<cache_dir>/<namespace>/<key>/`` where the key hashes the pipeline
parameters and the source files' signature, so changing ``n_mels`` or replacing the audio recomputes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from fedaug.data.audio import SpectrogramConfig, wavs_to_log_mel
from fedaug.data.base import option_key
from fedaug.data.cache import load_or_build
from fedaug.errors import ConfigError
from fedaug.validation import check_int, check_number

logger = logging.getLogger(__name__)

PIPELINE_VERSION = 1  # bump when the audio code changes its output, to invalidate caches


def make_config(
    dataset: str,
    sample_rate: int,
    channels: int,
    duration_ms: int,
    n_fft: int,
    hop_length: int,
    n_mels: int,
    top_db: float | None,
) -> SpectrogramConfig:
    """Validates the audio options and builds the pipeline config.

    The clip length is ``(sample_rate // 1000) * duration_ms`` samples, the official FLea code's formula
    (176000 samples for 4 s at 44.1 kHz, hence 344 frames with hop 512).
    """
    check_int(option_key(dataset, "sample_rate"), sample_rate, 1000)
    check_int(option_key(dataset, "channels"), channels, 1)
    check_int(option_key(dataset, "duration_ms"), duration_ms, 1)
    check_int(option_key(dataset, "n_fft"), n_fft, 4)
    check_int(option_key(dataset, "hop_length"), hop_length, 1)
    check_int(option_key(dataset, "n_mels"), n_mels, 1)
    if top_db is not None:
        check_number(option_key(dataset, "top_db"), top_db, 0, low_open=True)
    num_samples = (sample_rate // 1000) * duration_ms
    if num_samples <= n_fft // 2:
        raise ConfigError(
            f"dataset {dataset!r}: duration_ms={duration_ms} gives {num_samples} samples, "
            f"too short for n_fft={n_fft}"
        )
    return SpectrogramConfig(sample_rate, channels, num_samples, n_fft, hop_length, n_mels, top_db)


def cached_log_mel(
    *,
    cache_dir: Path,
    namespace: str,
    config: SpectrogramConfig,
    sources: Sequence[Path],
    clips: Callable[[], tuple[int, Iterable[tuple[str, bytes]]]],
    extra: Callable[[], dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """Spectrograms ``x`` of all clips plus the ``extra`` arrays (labels etc.), cached on disk.

    Args:
        cache_dir: cache root.
        namespace: cache sub-folder.
        config: the pipeline.
        sources: the audio files (or their archive) the spectrograms are made from (their SHA-256 keys the
            cache entry, :func:`fedaug.data.cache.load_or_build`).
        clips: returns the number of clips and an iterable of ``(name, wav bytes)`` in dataset order (only
            called on a cache miss).
        extra: returns the per-clip metadata arrays to store beside ``x``.
    """

    def build() -> dict[str, np.ndarray]:
        start = time.perf_counter()
        count, items = clips()
        logger.info(
            "computing %d %s spectrograms %s (first load only)", count, namespace, config.output_shape
        )
        arrays = {"x": wavs_to_log_mel(items, config, count=count), **extra()}
        logger.info("computed %s spectrograms in %.1f s", namespace, time.perf_counter() - start)
        return arrays

    params = {**config.as_dict(), "pipeline_version": PIPELINE_VERSION}
    return load_or_build(cache_dir, namespace, params=params, sources=sources, build=build)
