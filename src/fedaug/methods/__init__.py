"""Federated methods; importing this package registers the built-in ones."""

from fedaug.methods import (
    fedavg,  # noqa: F401  (registers "fedavg")
    feddecorr,  # noqa: F401  (registers "feddecorr")
    fedlc,  # noqa: F401  (registers "fedlc")
    fedntd,  # noqa: F401  (registers "fedntd")
    fedprox,  # noqa: F401  (registers "fedprox")
    fedrs,  # noqa: F401  (registers "fedrs")
    flea,  # noqa: F401  (registers "flea" and "flea_official")
    moon,  # noqa: F401  (registers "moon")
)
