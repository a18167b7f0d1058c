"""Audio front end in plain torch/numpy (no torchaudio, soundfile or scipy): WAV reader, resampler,
channel/length fixing and the log-mel spectrogram of the papers' UrbanSound8K pipeline.

WAV (RIFF/WAVE): a 12-byte ``RIFF <size> WAVE`` header followed by chunks ``<id:4> <size:u32 LE> <body>``
(padded to even length). The ``fmt `` chunk gives the format code, channels, sample rate, block alignment and
bits per sample; ``data`` holds interleaved little-endian frames. Supported: PCM (code 1) 8-bit unsigned,
16/24/32-bit signed; IEEE float (code 3) 32/64-bit; and WAVE_FORMAT_EXTENSIBLE (0xFFFE), whose real format is
the first two bytes of the SubFormat GUID. Integer samples are scaled to [-1, 1) by the container width
(``/ 2**(bits-1)``, 8-bit: ``(x - 128) / 128``), as torchaudio and soundfile do.

Resampling: band-limited (Smith) interpolation with a Hann-windowed sinc, computed polyphase as one strided
``conv1d``: both rates are divided by their gcd, each of the ``new`` output phases gets its own filter of
``2 * width + orig`` taps, the cutoff is ``rolloff * min(orig, new) / 2`` and the window spans
``lowpass_filter_width`` zero crossings on each side (defaults 0.99 and 6, the same method and defaults as
``torchaudio.functional.resample``).

Mel spectrogram (torchaudio ``MelSpectrogram`` defaults): ``torch.stft`` with a periodic Hann window of
``n_fft``, ``center=True`` with reflect padding (``num_samples // hop + 1`` frames), power 2, and an HTK-scale
triangular mel filterbank without area normalisation over ``0 .. sample_rate / 2``. Decibels
(``AmplitudeToDB(stype="power", top_db=80)``): ``10 * log10(clamp(x, 1e-10))``, then values more than
``top_db`` below the maximum of each spectrogram (all channels of one clip together) are raised to that floor.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedaug.errors import DatasetError

WAVE_FORMAT_PCM = 0x0001
WAVE_FORMAT_IEEE_FLOAT = 0x0003
WAVE_FORMAT_EXTENSIBLE = 0xFFFE


def read_wav(path: str | Path) -> tuple[Tensor, int]:
    """Reads a WAV file; returns ``(waveform [channels, frames] float32, sample_rate)``."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read WAV file {path}: {exc}") from exc
    return decode_wav(data, name=str(path))


def decode_wav(data: bytes, name: str = "<bytes>") -> tuple[Tensor, int]:
    """Decodes WAV bytes; returns ``(waveform [channels, frames] float32, sample_rate)``.

    Raises:
        DatasetError: not a RIFF/WAVE file, missing chunks, or an unsupported sample format (names ``name``).
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise DatasetError(f"{name} is not a RIFF/WAVE file")
    chunks = _read_chunks(data, name)
    if "fmt " not in chunks or "data" not in chunks or len(chunks["fmt "]) < 16:
        raise DatasetError(f"WAV file {name} lacks a valid 'fmt ' or 'data' chunk (found {sorted(chunks)})")
    fmt = chunks["fmt "]
    code, channels, sample_rate, _, _, bits = struct.unpack_from("<HHIIHH", fmt, 0)
    if code == WAVE_FORMAT_EXTENSIBLE and len(fmt) >= 26:
        code = struct.unpack_from("<H", fmt, 24)[0]  # first two bytes of the SubFormat GUID
    if channels < 1 or sample_rate < 1:
        raise DatasetError(f"WAV file {name} declares {channels} channels at {sample_rate} Hz")
    samples = _decode_samples(chunks["data"], code, bits, name)
    frames = len(samples) // channels
    waveform = samples[: frames * channels].reshape(frames, channels).T
    return torch.from_numpy(np.ascontiguousarray(waveform, dtype=np.float32)), int(sample_rate)


def _read_chunks(data: bytes, name: str) -> dict[str, bytes]:
    chunks: dict[str, bytes] = {}
    offset = 12
    while offset + 8 <= len(data):
        chunk_id = data[offset : offset + 4].decode("latin-1")
        size = struct.unpack_from("<I", data, offset + 4)[0]
        # Streaming writers leave the data size at 0 or 0xFFFFFFFF: take whatever follows.
        end = len(data) if chunk_id == "data" and size in (0, 0xFFFFFFFF) else offset + 8 + size
        chunks.setdefault(chunk_id, data[offset + 8 : min(end, len(data))])
        offset = end + (size & 1)
    return chunks


def _decode_samples(raw: bytes, code: int, bits: int, name: str) -> np.ndarray:
    """Interleaved samples as float32 (integer formats scaled to [-1, 1))."""
    width = max(bits // 8, 1)
    buf = raw[: len(raw) - len(raw) % width]
    if code == WAVE_FORMAT_PCM and bits == 8:
        return (np.frombuffer(buf, np.uint8).astype(np.float32) - 128.0) / 128.0
    if code == WAVE_FORMAT_PCM and bits in (16, 32):
        ints = np.frombuffer(buf, f"<i{width}")
        return (ints / float(2 ** (bits - 1))).astype(np.float32)
    if code == WAVE_FORMAT_PCM and bits == 24:
        b = np.frombuffer(buf, np.uint8).reshape(-1, 3).astype(np.int32)
        ints = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
        return (ints / float(1 << 23)).astype(np.float32)
    if code == WAVE_FORMAT_IEEE_FLOAT and bits in (32, 64):
        return np.frombuffer(buf, f"<f{width}").astype(np.float32)
    raise DatasetError(
        f"WAV file {name}: unsupported format code {code:#06x} with {bits} bits; supported: "
        "PCM 8/16/24/32-bit, IEEE float 32/64-bit, WAVE_FORMAT_EXTENSIBLE of those"
    )


@functools.lru_cache(maxsize=32)
def _sinc_kernel(orig: int, new: int, lowpass_filter_width: int, rolloff: float) -> tuple[Tensor, int]:
    """Polyphase filters ``[new, 1, 2 * width + orig]`` for reduced rates ``orig -> new``, and ``width``."""
    base = min(orig, new) * rolloff  # cutoff * 2, in units where the input rate is `orig`
    width = math.ceil(lowpass_filter_width * orig / base)
    taps = torch.arange(-width, width + orig, dtype=torch.float64)
    phases = torch.arange(new, dtype=torch.float64) * orig / new
    zero_crossings = ((taps[None, :] - phases[:, None]) * base / orig).clamp(
        -lowpass_filter_width, lowpass_filter_width
    )
    window = torch.cos(zero_crossings * math.pi / (2 * lowpass_filter_width)) ** 2
    sinc = torch.where(
        zero_crossings == 0, 1.0, torch.sin(math.pi * zero_crossings) / (math.pi * zero_crossings)
    )
    kernel = sinc * window * (base / orig)
    return kernel.to(torch.float32).unsqueeze(1), width


def resample(
    waveform: Tensor, orig_freq: int, new_freq: int, *, lowpass_filter_width: int = 6, rolloff: float = 0.99
) -> Tensor:
    """Resamples ``[..., time]`` from ``orig_freq`` to ``new_freq`` Hz (windowed sinc, polyphase; see module).

    The output has ``ceil(time * new_freq / orig_freq)`` samples.
    """
    if orig_freq <= 0 or new_freq <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_freq} -> {new_freq}")
    if orig_freq == new_freq:
        return waveform
    gcd = math.gcd(int(orig_freq), int(new_freq))
    orig, new = int(orig_freq) // gcd, int(new_freq) // gcd
    kernel, width = _sinc_kernel(orig, new, lowpass_filter_width, rolloff)
    shape = waveform.shape
    flat = waveform.reshape(-1, 1, shape[-1]).to(torch.float32)
    padded = F.pad(flat, (width, width + orig))
    out = F.conv1d(padded, kernel.to(flat.device), stride=orig)  # [B, new, blocks]
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    target = math.ceil(new * shape[-1] / orig)
    return out[:, :target].reshape(*shape[:-1], target)


def fix_channels(waveform: Tensor, channels: int) -> Tensor:
    """``[C, T] -> [channels, T]``: mono (or fewer channels) is repeated, extra channels are dropped."""
    if waveform.shape[0] == channels:
        return waveform
    index = torch.arange(channels) % waveform.shape[0]
    return waveform[index]


def fix_length(waveform: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
    """Truncates (keeping the start) or zero-pads ``[..., T]`` to ``num_samples``.

    Padding goes at the end, unless a seeded ``generator`` is given: then the pad is split at a random point
    between front and back (the official UrbanSound8K code's random padding, made reproducible).
    """
    length = waveform.shape[-1]
    if length >= num_samples:
        return waveform[..., :num_samples]
    pad = num_samples - length
    front = int(torch.randint(0, pad + 1, (1,), generator=generator)) if generator is not None else 0
    return F.pad(waveform, (front, pad - front))


def hz_to_mel(freq: Tensor) -> Tensor:
    """HTK mel scale: ``2595 * log10(1 + f / 700)``."""
    return 2595.0 * torch.log10(1.0 + freq / 700.0)


def mel_to_hz(mel: Tensor) -> Tensor:
    """Inverse of :func:`hz_to_mel`."""
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


@functools.lru_cache(maxsize=16)
def mel_filterbank(
    n_freqs: int, sample_rate: int, n_mels: int, f_min: float = 0.0, f_max: float | None = None
) -> Tensor:
    """Triangular HTK mel filters ``[n_freqs, n_mels]`` without area normalisation (torchaudio's defaults)."""
    f_max = float(sample_rate // 2) if f_max is None else f_max
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)
    mel_points = torch.linspace(
        float(hz_to_mel(torch.tensor(f_min))), float(hz_to_mel(torch.tensor(f_max))), n_mels + 2
    )
    f_points = mel_to_hz(mel_points.to(torch.float64))
    f_diff = f_points[1:] - f_points[:-1]
    slopes = f_points[None, :] - all_freqs[:, None]  # [n_freqs, n_mels + 2]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.clamp(torch.minimum(down, up), min=0.0).to(torch.float32)


def mel_spectrogram(
    waveform: Tensor, sample_rate: int, *, n_fft: int, hop_length: int, n_mels: int
) -> Tensor:
    """Power mel spectrogram ``[..., time] -> [..., n_mels, time // hop_length + 1]`` (see module doc)."""
    shape = waveform.shape
    window = torch.hann_window(n_fft, periodic=True, dtype=torch.float32, device=waveform.device)
    spec = torch.stft(
        waveform.reshape(-1, shape[-1]).to(torch.float32),
        n_fft=n_fft,
        hop_length=hop_length,
        window=window,
        center=True,
        pad_mode="reflect",
        return_complex=True,
    )
    power = spec.abs().pow(2.0)  # [B, n_fft // 2 + 1, frames]
    fbank = mel_filterbank(n_fft // 2 + 1, sample_rate, n_mels).to(power.device)
    mel = torch.matmul(power.transpose(-1, -2), fbank).transpose(-1, -2)
    return mel.reshape(*shape[:-1], n_mels, mel.shape[-1])


def amplitude_to_db(power: Tensor, top_db: float | None = 80.0) -> Tensor:
    """``10 * log10(clamp(power, 1e-10))``, floored at ``max - top_db`` per spectrogram ``[..., C, F, T]``."""
    db = 10.0 * torch.log10(torch.clamp(power, min=1e-10))
    if top_db is None:
        return db
    packed = db.reshape(-1, *db.shape[-3:]) if db.dim() > 2 else db.reshape(1, 1, *db.shape)
    floor = packed.amax(dim=(-3, -2, -1), keepdim=True) - top_db
    return torch.maximum(packed, floor).reshape(db.shape)


@dataclass(frozen=True)
class SpectrogramConfig:
    """The clip -> log-mel pipeline. Defaults are the papers' UrbanSound8K settings (output ``[2, 64, 344]``).

    Attributes:
        sample_rate: target rate in Hz (clips are resampled to it).
        channels: output channels (mono duplicated, extras dropped).
        num_samples: clip length after pad/truncate. The official code uses ``(sr // 1000) * 4000 = 176000``
            for 4 s at 44.1 kHz (not 176400), which gives ``176000 // 512 + 1 = 344`` frames.
        n_fft: FFT size (and window length).
        hop_length: hop between frames.
        n_mels: number of mel bands.
        top_db: dynamic range kept by the dB conversion (None keeps all).
    """

    sample_rate: int = 44100
    channels: int = 2
    num_samples: int = 176000
    n_fft: int = 1024
    hop_length: int = 512
    n_mels: int = 64
    top_db: float | None = 80.0

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """``(channels, n_mels, num_samples // hop_length + 1)``."""
        return self.channels, self.n_mels, self.num_samples // self.hop_length + 1

    def as_dict(self) -> dict[str, int | float | None]:
        """Plain dict of the parameters (used in cache keys)."""
        return asdict(self)


def prepare_waveform(
    waveform: Tensor, sample_rate: int, config: SpectrogramConfig, generator: torch.Generator | None = None
) -> Tensor:
    """Resample, fix channels and fix length: ``[C, T]`` at ``sample_rate`` -> ``[channels, num_samples]``."""
    waveform = resample(waveform, sample_rate, config.sample_rate)
    return fix_length(fix_channels(waveform, config.channels), config.num_samples, generator)


def log_mel(waveforms: Tensor, config: SpectrogramConfig) -> Tensor:
    """Prepared clips ``[..., channels, num_samples]`` -> dB mel spectrograms ``[..., channels, n_mels, T]``.

    ``T = num_samples // hop_length + 1``.
    """
    mel = mel_spectrogram(
        waveforms, config.sample_rate, n_fft=config.n_fft, hop_length=config.hop_length, n_mels=config.n_mels
    )
    return amplitude_to_db(mel, config.top_db)


def wavs_to_log_mel(
    clips: Iterable[tuple[str, bytes]], config: SpectrogramConfig, *, count: int, batch_size: int = 64
) -> np.ndarray:
    """Decodes ``count`` WAV clips ``(name, bytes)`` into float32 spectrograms ``[count, *output_shape]``.

    Clips are prepared one by one (their rates may differ) and transformed in batches of ``batch_size``.
    """
    out = np.empty((count, *config.output_shape), dtype=np.float32)
    batch: list[Tensor] = []
    filled = 0
    for name, data in clips:
        if filled + len(batch) >= count:
            raise DatasetError(f"more than the expected {count} clips (at {name})")
        waveform, sample_rate = decode_wav(data, name)
        batch.append(prepare_waveform(waveform, sample_rate, config))
        if len(batch) == batch_size:
            out[filled : filled + len(batch)] = log_mel(torch.stack(batch), config).numpy()
            filled, batch = filled + len(batch), []
    if batch:
        out[filled : filled + len(batch)] = log_mel(torch.stack(batch), config).numpy()
        filled += len(batch)
    if filled != count:
        raise DatasetError(f"expected {count} clips, got {filled}")
    return out
