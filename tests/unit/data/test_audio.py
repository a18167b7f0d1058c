"""Tests of the torch audio front end: WAV reader, resampler, channel/length fixing, mel spectrogram, dB."""

from __future__ import annotations

import io
import math
import struct
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from fedaug.data.audio import (
    SpectrogramConfig,
    amplitude_to_db,
    decode_wav,
    fix_channels,
    fix_length,
    hz_to_mel,
    log_mel,
    mel_filterbank,
    mel_spectrogram,
    mel_to_hz,
    prepare_waveform,
    read_wav,
    resample,
    wavs_to_log_mel,
)
from fedaug.errors import DatasetError


def _riff(fmt_chunk: bytes, data: bytes, extra_chunks: bytes = b"") -> bytes:
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + extra_chunks
    body += b"data" + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _fmt(code: int, channels: int, rate: int, bits: int) -> bytes:
    block = channels * bits // 8
    return struct.pack("<HHIIHH", code, channels, rate, rate * block, block, bits)


def _fmt_extensible(subformat: int, channels: int, rate: int, bits: int) -> bytes:
    guid = struct.pack("<H", subformat) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
    return _fmt(0xFFFE, channels, rate, bits) + struct.pack("<HHI", 22, bits, 0) + guid


def _stdlib_wav(samples: np.ndarray, rate: int, width: int) -> bytes:
    """Frames ``[T, C]`` of raw integers written with the stdlib ``wave`` module."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(samples.shape[1])
        handle.setsampwidth(width)
        handle.setframerate(rate)
        handle.writeframes(samples.astype("<i2" if width == 2 else np.uint8).tobytes())
    return buffer.getvalue()


# ---- WAV reader ----------------------------------------------------------------------------------------


def test_wav_16bit_stereo_round_trip_with_stdlib_wave() -> None:
    # Prepare
    ints = np.random.default_rng(0).integers(-32768, 32767, size=(101, 2))
    # Execute
    waveform, rate = decode_wav(_stdlib_wav(ints, 16000, 2))
    # Assert
    assert rate == 16000
    assert waveform.dtype == torch.float32 and waveform.shape == (2, 101)
    np.testing.assert_array_equal(waveform.numpy(), (ints / 32768.0).T.astype(np.float32))


def test_wav_8bit_unsigned_with_stdlib_wave() -> None:
    values = np.array([[0], [128], [255]])
    waveform, _ = decode_wav(_stdlib_wav(values, 8000, 1))
    np.testing.assert_allclose(waveform.numpy(), [[-1.0, 0.0, 127 / 128]])


@pytest.mark.parametrize("bits", [32, 64])
def test_wav_ieee_float_written_by_hand(bits: int) -> None:
    values = np.array([[0.5, -0.25], [1.0, -1.0], [0.125, 0.0]])
    data = values.astype(f"<f{bits // 8}").tobytes()
    waveform, rate = decode_wav(
        _riff(_fmt(3, 2, 22050, bits), data, extra_chunks=b"LIST\x03\x00\x00\x00abc\x00")
    )
    assert rate == 22050
    np.testing.assert_array_equal(waveform.numpy(), values.T.astype(np.float32))


def test_wav_24bit_pcm_and_extensible() -> None:
    ints = [0, 1, -1, 2**23 - 1, -(2**23)]
    data = b"".join(struct.pack("<i", v)[:3] for v in ints)
    expected = np.array([ints], dtype=np.float64) / 2**23
    plain, _ = decode_wav(_riff(_fmt(1, 1, 44100, 24), data))
    extensible, _ = decode_wav(_riff(_fmt_extensible(1, 1, 44100, 24), data))
    np.testing.assert_allclose(plain.numpy(), expected, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(extensible.numpy(), plain.numpy())


def test_wav_extensible_float_and_32bit_pcm() -> None:
    floats = np.array([0.1, -0.7], dtype="<f4")
    waveform, _ = decode_wav(_riff(_fmt_extensible(3, 1, 8000, 32), floats.tobytes()))
    np.testing.assert_array_equal(waveform.numpy()[0], floats)
    ints = np.array([2**30, -(2**31)], dtype="<i4")
    waveform, _ = decode_wav(_riff(_fmt(1, 1, 8000, 32), ints.tobytes()))
    np.testing.assert_allclose(waveform.numpy()[0], [0.5, -1.0])


def test_read_wav_from_path(tmp_path: Path) -> None:
    path = tmp_path / "tone.wav"
    path.write_bytes(_stdlib_wav(np.array([[1000], [-1000]]), 8000, 2))
    waveform, rate = read_wav(path)
    assert rate == 8000 and waveform.shape == (1, 2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"RIFX0000WAVE", "not a RIFF/WAVE"),
        (b"RIFF\x04\x00\x00\x00WAVE", "lacks a valid"),
        (_riff(_fmt(2, 1, 8000, 4), b"\x00\x00"), "unsupported format code 0x0002"),
        (_riff(_fmt(3, 1, 8000, 16), b"\x00\x00"), "unsupported format"),
    ],
)
def test_wav_corrupt_or_unsupported_names_the_file(data: bytes, message: str) -> None:
    with pytest.raises(DatasetError, match=message) as info:
        decode_wav(data, name="clip.wav")
    assert "clip.wav" in str(info.value)


def test_read_wav_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"missing\.wav"):
        read_wav(tmp_path / "missing.wav")


# ---- resampling, channels, length ----------------------------------------------------------------------


def _peak_hz(signal: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    return float(np.fft.rfftfreq(len(signal), 1.0 / rate)[spectrum.argmax()])


@pytest.mark.parametrize(("orig", "new"), [(8000, 44100), (48000, 44100), (44100, 16000)])
def test_resample_keeps_tone_frequency(orig: int, new: int) -> None:
    # Prepare: a 440 Hz tone, 1 s
    tone = torch.sin(2 * math.pi * 440.0 * torch.arange(orig) / orig)
    # Execute
    out = resample(tone, orig, new)
    # Assert: length, frequency, and amplitude against the ideal tone away from the edges
    assert out.shape == (math.ceil(orig * new / orig),)
    assert abs(_peak_hz(out.numpy(), new) - 440.0) <= 1.0
    ideal = np.sin(2 * np.pi * 440.0 * np.arange(new) / new)
    assert np.abs(out.numpy() - ideal)[200:-200].max() < 2e-3


def test_resample_removes_content_above_new_nyquist() -> None:
    high = torch.sin(2 * math.pi * 10000.0 * torch.arange(44100) / 44100)
    out = resample(high, 44100, 16000)
    assert out[200:-200].abs().max() < 0.01


def test_resample_same_rate_and_batch_shape() -> None:
    batch = torch.randn(3, 2, 1000)
    assert resample(batch, 8000, 8000) is batch
    assert resample(batch, 8000, 16000).shape == (3, 2, 2000)


def test_fix_channels_duplicates_mono_and_drops_extra() -> None:
    mono = torch.arange(4.0).unsqueeze(0)
    assert torch.equal(fix_channels(mono, 2), torch.cat([mono, mono]))
    three = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(fix_channels(three, 2), three[:2])


def test_fix_length_pads_at_end_and_truncates_start() -> None:
    clip = torch.ones(2, 5)
    padded = fix_length(clip, 8)
    assert padded.shape == (2, 8) and torch.equal(padded[:, :5], clip) and padded[:, 5:].abs().sum() == 0
    assert torch.equal(fix_length(torch.arange(10.0), 4), torch.arange(4.0))


def test_fix_length_random_padding_is_seeded() -> None:
    clip = torch.ones(1, 5)
    first = fix_length(clip, 50, torch.Generator().manual_seed(3))
    second = fix_length(clip, 50, torch.Generator().manual_seed(3))
    assert torch.equal(first, second) and first.sum() == 5


# ---- mel spectrogram and dB -----------------------------------------------------------------------------


def test_htk_mel_scale() -> None:
    assert float(hz_to_mel(torch.tensor(1000.0))) == pytest.approx(1000.0, abs=0.05)
    freqs = torch.tensor([0.0, 440.0, 8000.0], dtype=torch.float64)
    torch.testing.assert_close(mel_to_hz(hz_to_mel(freqs)), freqs)


def test_mel_filterbank_properties() -> None:
    fbank = mel_filterbank(513, 44100, 64)
    assert fbank.shape == (513, 64)
    assert fbank.min() >= 0 and fbank.max() <= 1.0
    assert (fbank.sum(dim=0) > 0).all()  # no empty filter at these settings
    # Each triangle peaks at its centre: centres increase with the band index.
    assert (torch.diff(fbank.argmax(dim=0)) >= 0).all()


def _mel_centres(sample_rate: int, n_mels: int) -> np.ndarray:
    top = float(hz_to_mel(torch.tensor(sample_rate / 2)))
    return mel_to_hz(torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64))[1:-1].numpy()


@pytest.mark.parametrize("freq", [500.0, 1000.0, 3000.0])
def test_pure_tone_peaks_in_the_right_mel_band(freq: float) -> None:
    # Prepare
    rate, n_mels = 16000, 40
    tone = torch.sin(2 * math.pi * freq * torch.arange(rate) / rate)
    # Execute
    mel = mel_spectrogram(tone, rate, n_fft=1024, hop_length=256, n_mels=n_mels)
    # Assert: shape (centred frames) and the loudest band is the one centred nearest the tone
    assert mel.shape == (n_mels, rate // 256 + 1)
    expected = int(np.abs(_mel_centres(rate, n_mels) - freq).argmin())
    assert int(mel.mean(dim=-1).argmax()) == expected


def test_mel_spectrogram_matches_numpy_reference() -> None:
    # Prepare: an independent numpy STFT (reflect pad n_fft/2, periodic Hann, power 2)
    rate, n_fft, hop = 8000, 256, 64
    signal = np.random.default_rng(1).standard_normal(2000)
    padded = np.pad(signal, n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = np.stack([padded[i : i + n_fft] * window for i in range(0, len(padded) - n_fft + 1, hop)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    reference = (power @ mel_filterbank(n_fft // 2 + 1, rate, 32).double().numpy()).T
    # Execute
    ours = mel_spectrogram(
        torch.tensor(signal, dtype=torch.float32), rate, n_fft=n_fft, hop_length=hop, n_mels=32
    )
    # Assert
    np.testing.assert_allclose(ours.numpy(), reference, rtol=1e-3, atol=1e-3)


def test_amplitude_to_db_values_and_top_db_per_spectrogram() -> None:
    power = torch.tensor([1.0, 10.0, 100.0, 0.0]).reshape(1, 1, 4)
    torch.testing.assert_close(
        amplitude_to_db(power, top_db=None).flatten(), torch.tensor([0.0, 10.0, 20.0, -100.0])
    )
    torch.testing.assert_close(
        amplitude_to_db(power, top_db=15.0).flatten(), torch.tensor([5.0, 10.0, 20.0, 5.0])
    )
    # Two clips in a batch get their own floor; both channels of a clip share one.
    batch = torch.stack([power.expand(2, 1, 4), power.expand(2, 1, 4) * 1000])
    db = amplitude_to_db(batch, top_db=15.0)
    assert db[0].min() == 5.0 and db[1].min() == 35.0


def test_paper_pipeline_shape_is_2_64_344() -> None:
    config = SpectrogramConfig()
    assert config.output_shape == (2, 64, 344)
    mono = torch.randn(1, 22050 * 3)  # 3 s mono at 22.05 kHz
    prepared = prepare_waveform(mono, 22050, config)
    assert prepared.shape == (2, 176000) and torch.equal(prepared[0], prepared[1])
    assert log_mel(prepared.unsqueeze(0), config).shape == (1, 2, 64, 344)


def test_wavs_to_log_mel_batches_and_counts() -> None:
    config = SpectrogramConfig(
        sample_rate=8000, channels=1, num_samples=4000, n_fft=256, hop_length=128, n_mels=16
    )
    clip = _stdlib_wav(np.random.default_rng(2).integers(-3000, 3000, size=(3000, 1)), 8000, 2)
    out = wavs_to_log_mel([(f"c{i}", clip) for i in range(5)], config, count=5, batch_size=2)
    assert out.shape == (5, 1, 16, 32) and np.isfinite(out).all()
    np.testing.assert_allclose(out[0], out[4], atol=1e-4)
    with pytest.raises(DatasetError, match="expected 6 clips"):
        wavs_to_log_mel([("c", clip)] * 5, config, count=6)
