"""Old import paths of moved modules, kept working for one release (see CHANGELOG.md, "Layout").

``import fedaug.local_training`` still gives the module now at ``fedaug.training.loop`` (the same module
object, so patching one patches the other) and warns once with a :class:`DeprecationWarning` naming the new
path. The old packages (``fedaug.experiments``, ``fedaug.reproducibility``, ``fedaug.analysis``) exist only
as parents of their moved modules. Installed from :mod:`fedaug` at import; nothing else is loaded until an
old path is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence

MOVED: dict[str, str] = {
    "fedaug.cli_analyze": "fedaug.cli.analyze",
    "fedaug.cli_attack": "fedaug.cli.attack",
    "fedaug.cli_common": "fedaug.cli.common",
    "fedaug.cli_flower": "fedaug.cli.flower",
    "fedaug.cli_zsdg": "fedaug.cli.zsdg",
    "fedaug.catalog": "fedaug.cli.listing",
    "fedaug.limits": "fedaug.config.limits",
    "fedaug.presets": "fedaug.config.presets",
    "fedaug.yamlio": "fedaug.config.yamlio",
    "fedaug.device": "fedaug.runtime.device",
    "fedaug.precision": "fedaug.runtime.precision",
    "fedaug.seeding": "fedaug.runtime.seeding",
    "fedaug.machine": "fedaug.runtime.machine",
    "fedaug.startup": "fedaug.runtime.startup",
    "fedaug.paths": "fedaug.runtime.paths",
    "fedaug.jsonio": "fedaug.runtime.files",
    "fedaug.log_once": "fedaug.runtime.log_once",
    "fedaug.engine.memory_format": "fedaug.runtime.memory_format",
    "fedaug.local_training": "fedaug.training.loop",
    "fedaug.objective": "fedaug.training.objective",
    "fedaug.step_graphs": "fedaug.training.step_graphs",
    "fedaug.row_mask": "fedaug.training.row_mask",
    "fedaug.flat_state": "fedaug.training.flat_state",
    "fedaug.experiments.config": "fedaug.config.schema",
    "fedaug.experiments.load": "fedaug.config.load",
    "fedaug.experiments.resolve": "fedaug.runs.resolve",
    "fedaug.experiments.runner": "fedaug.runs.runner",
    "fedaug.experiments.sweep": "fedaug.sweeps.sweep",
    "fedaug.experiments.workers": "fedaug.sweeps.workers",
    "fedaug.experiments.cluster": "fedaug.sweeps.cluster",
    "fedaug.experiments.sweep_order": "fedaug.sweeps.order",
    "fedaug.experiments.estimate": "fedaug.sweeps.estimate",
    "fedaug.experiments.round_ratio": "fedaug.sweeps.round_ratio",
    "fedaug.reproducibility.identity": "fedaug.config.identity",
    "fedaug.reproducibility.resume": "fedaug.runs.resume",
    "fedaug.reproducibility.verify": "fedaug.runs.verify",
    "fedaug.reproducibility.branch": "fedaug.runs.branch",
    "fedaug.engine.lock": "fedaug.runs.lock",
    "fedaug.engine.batched": "fedaug.engine.batched.stacked",
    "fedaug.engine.batched_modes": "fedaug.engine.batched.modes",
    "fedaug.engine.padded": "fedaug.engine.batched.padded",
    "fedaug.engine.padded_graphs": "fedaug.engine.batched.padded_graphs",
    "fedaug.methods.flea_loss": "fedaug.methods.flea.loss",
    "fedaug.methods.flea_buffer": "fedaug.methods.flea.buffer",
    "fedaug.methods.head_passes": "fedaug.methods.flea.head_passes",
    "fedaug.methods.zsdg": "fedaug.methods.fedzda.zsdg",
    "fedaug.methods.ccvr_stats": "fedaug.methods.ccvr.stats",
    "fedaug.methods.losses": "fedaug.methods.parts.losses",
    "fedaug.methods.data_pool": "fedaug.methods.parts.data_pool",
    "fedaug.methods.payloads": "fedaug.methods.parts.payloads",
    "fedaug.methods.aggregate": "fedaug.methods.parts.aggregate",
    "fedaug.methods.checks": "fedaug.methods.parts.checks",
    "fedaug.methods.preset": "fedaug.methods.parts.preset",
    "fedaug.analysis.features": "fedaug.results.features",
    "fedaug.results.figure_files": "fedaug.runtime.figure_files",
}
"""Old dotted module path -> where the module is now."""

OLD_PACKAGES = frozenset({"fedaug.experiments", "fedaug.reproducibility", "fedaug.analysis"})
"""Packages that are gone; each is an empty parent so that its old submodules import."""


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self.target = target
        self.real_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.target is None:
            module = types.ModuleType(spec.name, f"moved: its modules are in {_new_homes(spec.name)}")
            module.__path__ = []
            return module
        warnings.warn(
            f"{spec.name} moved to {self.target}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if self.target is not None:  # the import system set the alias's spec on the real module: put it back
            module.__spec__ = self.real_spec


def _new_homes(package: str) -> str:
    return ", ".join(
        sorted({new.rpartition(".")[0] for old, new in MOVED.items() if old.startswith(package)})
    )


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and the empty :data:`OLD_PACKAGES`) and nothing else."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        del path, target
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, _Alias(MOVED[fullname]))
        if fullname in OLD_PACKAGES:
            return importlib.util.spec_from_loader(fullname, _Alias(None), is_package=True)
        return None


def install() -> None:
    """Puts the finder last on ``sys.meta_path`` (once): real modules always win."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
