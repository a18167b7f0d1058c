"""The one exception hierarchy of fedaug.

Every error a user can cause (bad config, unknown name, impossible partition, missing or corrupt dataset)
is a subclass of :class:`FedaugError`; the CLI turns these into a one-line message and exit code 2.
"""

from __future__ import annotations


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


class ClientError(FedaugError):
    """A client failed during a round; carries the round, client id and method."""

    def __init__(self, message: str, *, round_num: int, client_id: int, method: str) -> None:
        super().__init__(f"round {round_num}, client {client_id}, method {method!r}: {message}")
        self.round_num = round_num
        self.client_id = client_id
        self.method = method
