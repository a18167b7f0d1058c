"""Method presets: a registered name for an existing method with other defaults for some of its options.

A preset is not a new method (no subclass, no code of its own): it is a name, the method class it builds, and
a config class that only changes defaults. ``flea_official`` is :class:`~fedaug.methods.flea.method.FLea`
with the
authors' code's choices as defaults; ``method: flea_official`` builds ``FLea`` with those defaults and the
user's options on top (``--set method.decor_form=dcor_squared`` still works).

Wherever a method is looked up by name (``registry.get("method", name)``: the runner, the results store, the
catalog, the feature analysis), a preset answers as a method class does:

* ``name``: the registry key, which is also the built method's ``name`` (log lines, errors and outputs name
  the method the user chose);
* ``config_cls``: the method's config with the preset's defaults, so its fields, their order and types are
  the method's (``config.yaml`` and ``env.json`` hold the same keys as for the method itself);
* called with an optional config, it returns the method (the preset's defaults when none is given).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fedaug.api import Method, MethodConfig

M = TypeVar("M", bound=Method)


@dataclass(frozen=True)
class MethodPreset(Generic[M]):
    """A registered name for ``method`` with ``config_cls``'s defaults.

    Attributes:
        name: the registry key, and the ``name`` of the methods it builds.
        method: the method class it builds (its ``name`` is what :attr:`base_name` reports).
        config_cls: a frozen dataclass subclass of ``method.config_cls`` that changes defaults only (checked
            here: the same fields, in the same order, with the same types).
    """

    name: str
    method: type[M]
    config_cls: type[MethodConfig]

    def __post_init__(self) -> None:
        base = self.method.config_cls
        if not issubclass(self.config_cls, base) or _layout(self.config_cls) != _layout(base):
            raise TypeError(
                f"preset {self.name!r}: {self.config_cls.__name__} must subclass {base.__name__} and change "
                "only its defaults (the same fields, in the same order, with the same types)"
            )

    @property
    def base_name(self) -> str:
        """The registry name of the method the preset builds (``flea``)."""
        return self.method.name

    def changed_defaults(self) -> dict[str, tuple[Any, Any]]:
        """Every option whose default the preset changes: name -> (the method's default, the preset's)."""
        ours, theirs = self.config_cls(), self.method.config_cls()
        pairs = {f.name: (getattr(theirs, f.name), getattr(ours, f.name)) for f in dataclasses.fields(ours)}
        return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}

    def __call__(self, config: MethodConfig | None = None) -> M:
        """The method with ``config`` (default: the preset's defaults); its ``name`` is the preset's."""
        method = self.method(self.config_cls() if config is None else config)
        vars(method)["name"] = self.name  # an instance attribute over the class's, as a subclass would set
        return method


def _layout(config_cls: type[MethodConfig]) -> list[tuple[str, Any]]:
    return [(f.name, f.type) for f in dataclasses.fields(config_cls)]
