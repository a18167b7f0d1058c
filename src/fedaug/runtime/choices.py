"""The spelled choices of a run's settings, in a module without torch.

The config's schema (:mod:`fedaug.config.schema`) checks every value against these when a config is built,
and a command builds its config before it imports torch (seconds on a loaded host), so a typo is refused at
once. The modules that act on a setting (:mod:`fedaug.runtime.device`, :mod:`fedaug.runtime.precision`,
:mod:`fedaug.runtime.memory_format`, :mod:`fedaug.training.loop`) take their choices from here.
"""

from __future__ import annotations

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
"""What ``engine.device`` and every ``--device`` accept."""

PRECISIONS = ("float32", "bf16")
"""``engine.precision``: float32, or bfloat16 autocast (:mod:`fedaug.runtime.precision`)."""

CHANNELS_LAST_MODES = ("auto", "none", "eval", "all")
"""``engine.channels_last`` (:mod:`fedaug.runtime.memory_format`). ``none`` rather than ``off``: YAML reads a
bare ``off`` as the boolean false."""

OPTIMIZERS = ("adam", "sgd")
"""``train.optimizer``: the local optimizers :func:`fedaug.training.loop.make_optimizer` builds."""


def is_device_name(name: object) -> bool:
    """Whether ``name`` is spelled like a device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (any case)."""
    text = str(name).strip().lower()
    kind, _, index = text.partition(":")
    return text in ("auto", "cpu", "cuda") or (kind == "cuda" and index.isdigit())
