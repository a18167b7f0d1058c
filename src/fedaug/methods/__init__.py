"""Federated methods; importing this package registers the built-in ones."""

from fedaug.methods import (
    ccvr,  # noqa: F401  (registers "ccvr")
    fedaugmix,  # noqa: F401  (registers "fedaugmix" and "fedprox_augmix")
    fedavg,  # noqa: F401  (registers "fedavg")
    fedbr,  # noqa: F401  (registers "fedbr")
    feddata,  # noqa: F401  (registers "feddata")
    feddecorr,  # noqa: F401  (registers "feddecorr")
    fedgen,  # noqa: F401  (registers "fedgen")
    fedlc,  # noqa: F401  (registers "fedlc")
    fedmix,  # noqa: F401  (registers "fedmix")
    fedntd,  # noqa: F401  (registers "fedntd")
    fedprox,  # noqa: F401  (registers "fedprox")
    fedrs,  # noqa: F401  (registers "fedrs")
    flea,  # noqa: F401  (registers "flea" and "flea_official")
    moon,  # noqa: F401  (registers "moon")
)
