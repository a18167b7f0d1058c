"""The one exception hierarchy of fedaug.

Every error a user can cause (bad config, unknown name, impossible partition, missing or corrupt dataset)
is a subclass of :class:`FedaugError`; the CLI turns these into a one-line message and exit code 2 (and, as a
last resort, any ``OSError`` naming a file, e.g. a permission error, into a line naming the path).
"""

from __future__ import annotations

import re

OUT_OF_MEMORY = re.compile(r"out of memory\.?( Tried to allocate [\d.]+ \w+\.?)?")
"""PyTorch's device out-of-memory sentence (CUDA's and MPS's), with the size it tried to allocate."""


SHOWN_CHARS = 80
"""How much of a value a user gave an error message echoes (a 1 MB value is not echoed whole)."""


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were (for error messages)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def shown(value: object) -> str:
    """``repr(value)`` cut to a readable length (:func:`shorten`); a huge integer by its size."""
    if isinstance(value, int) and value.bit_length() > 128:  # repr() of >4300 digits raises
        return f"<an integer of {value.bit_length()} bits>"
    return shorten(repr(value))


class FedaugError(Exception):
    """Base class of all errors a user can cause."""


class ConfigError(FedaugError):
    """A config key or value is invalid (the message names the key, the value and the valid choices)."""


class RegistryError(ConfigError):
    """An unknown or duplicate name was looked up in a registry."""


class PartitionError(FedaugError):
    """A partition cannot be made with the requested settings."""


class DatasetError(FedaugError):
    """A dataset file is missing, corrupt or of the wrong shape."""


class IncompatibleModelError(FedaugError):
    """A method or split layer does not fit the chosen model."""


class PathError(FedaugError):
    """A file or folder cannot be read or written (the message names the path and what to do)."""


class RunLockedError(FedaugError):
    """Another process holds a run directory's lock (the message names its PID)."""


class CheckpointError(FedaugError):
    """A checkpoint or saved run file is corrupt (the message names the file and how to recover)."""


def path_error(exc: OSError, path: object, action: str = "access") -> PathError:
    """A :class:`PathError` of one line for ``exc`` raised while trying to ``action`` ``path``."""
    reason = exc.strerror or type(exc).__name__
    return PathError(f"cannot {action} {path}: {reason}")


class ClientError(FedaugError):
    """A client failed during a round; carries the round, client id and method."""

    def __init__(self, message: str, *, round_num: int, client_id: int, method: str) -> None:
        super().__init__(f"round {round_num}, client {client_id}, method {method!r}: {message}")
        self.round_num = round_num
        self.client_id = client_id
        self.method = method


def out_of_memory_sentence(text: str) -> str | None:
    """``text`` on one line up to the end of PyTorch's out-of-memory sentence (its message goes on with every
    process's memory, a paragraph); None when ``text`` is not a device running out of memory."""
    line = " ".join(text.splitlines())
    found = OUT_OF_MEMORY.search(line)
    return None if found is None else line[: found.end()]
