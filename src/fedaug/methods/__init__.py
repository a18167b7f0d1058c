"""Federated methods; importing this package registers the built-in ones."""

from fedaug.methods import (  # noqa: F401
    fedaugmix,
    fedavg,
    fedbr,
    feddata,
    feddecorr,
    fedgen,
    fedlc,
    fedmix,
    fedntd,
    fedprox,
    fedrs,
    moon,
    qffl,
)
from fedaug.methods.ccvr import method as ccvr  # noqa: F401
from fedaug.methods.fedzda import method as fedzda  # noqa: F401
from fedaug.methods.flea import method as flea  # noqa: F401
