"""Command-line pieces shared by ``fedaug`` and its sub-command modules (``cli_flower``, ...): the config
arguments every experiment command takes, ``--device``, turning them into an ExperimentConfig, and the
figure a finished job ends with.

Kept apart from :mod:`fedaug.cli.main` so that the sub-command modules never import the top-level CLI back.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig

logger = logging.getLogger("fedaug")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (the bad value and where to look), exit 2, like
    every other user error; its sub-command parsers are of this class too.

    ``populate`` (a keyword of ``add_parser`` too) adds the parser's arguments when it first parses, not when
    it is built: a sub-command whose options come from modules that import torch (``fedaug attack``) keeps
    ``fedaug --help`` and every other command from importing them.
    """

    def __init__(
        self, *args: Any, populate: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._populate = populate

    def populated(self) -> OneLineParser:
        """This parser with its arguments added (runs a pending ``populate`` once)."""
        if self._populate is not None:
            populate, self._populate = self._populate, None
            populate(self)
        return self

    def then_populate(self, more: Callable[[argparse.ArgumentParser], None]) -> bool:
        """Runs ``more`` after a pending ``populate`` (True), or returns False when nothing is pending."""
        if self._populate is None:
            return False
        first = self._populate

        def both(parser: argparse.ArgumentParser) -> None:
            first(parser)
            more(parser)

        self._populate = both
        return True

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        self.populated()
        return super().parse_known_args(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """CONFIG ..., --set, --data-dir, --out-dir, --seed, --smoke and --method (run, partition, flower)."""
    parser.add_argument(
        "configs",
        nargs="*",
        help="YAML files or preset names (fedaug list presets), merged in order (default: default)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set method=fedprox --set method.proximal_mu=0.01",
    )
    parser.add_argument("--data-dir", help="directory holding the datasets (default: $FEDAUG_DATA)")
    parser.add_argument("--out-dir", help="root of run directories (default: runs)")
    parser.add_argument("--seed", type=int, help="run seed")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="2 rounds, 1 local epoch: a quick wiring check, in its own run dir (name <name>-smoke)",
    )
    parser.add_argument("--method", help="run only these methods (comma-separated), overriding the preset's")


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    """``--device``: shorthand for ``--set engine.device=...`` (run, sweep and the Flower commands)."""
    parser.add_argument(
        "--device",
        help="where to compute: auto (default: cuda if torch sees a GPU, else cpu), cpu, cuda or cuda:N",
    )


def shared_overrides(args: argparse.Namespace) -> list[str]:
    """The ``--set`` overrides of ``--data-dir``, ``--out-dir`` and ``--device`` (run, sweep)."""
    overrides = []  # an empty value is passed on, and refused by the config's checks (not ignored)
    if args.data_dir is not None:
        overrides.append(f"data.data_dir={args.data_dir}")
    if args.out_dir is not None:
        overrides.append(f"out_dir={args.out_dir}")
    if getattr(args, "device", None) is not None:
        overrides.append(f"engine.device={args.device}")
    return overrides


def load_config(args: argparse.Namespace, *, tag: str = "") -> ExperimentConfig:
    """The command line's config; ``--smoke`` and an override of the run's length give it a run dir of its
    own (:func:`fedaug.config.load.load_run_config`), ``tag`` is appended to its name."""
    from fedaug.config.load import load_run_config

    paths, overrides = config_layers(args)
    config = load_run_config(paths, overrides, smoke=args.smoke, tag=tag)
    return with_plugins(config, getattr(args, "plugins", []))


def preflight_config(args: argparse.Namespace) -> None:
    """Refuses a config file that cannot be read, a ``--set`` that cannot be parsed, an unknown key, a
    value of the wrong type or out of range before torch is imported: the config is built as
    :func:`load_config` builds it (:mod:`fedaug.config.load` needs no torch); the names of methods,
    datasets and models and their options are checked when the run builds them."""
    from fedaug.config.load import load_run_config

    config = load_run_config(*config_layers(args), smoke=args.smoke)
    if not config.plugins and not getattr(args, "plugins", []):
        check_builtin_names(config)


COMPONENTS = (("method", "method"), ("dataset", "data"), ("model", "model"), ("partitioner", "partition"))
"""The registry kind of each named section of a config."""


def check_builtin_names(config: ExperimentConfig) -> None:
    """Refuses a method (or compared method), dataset, model or partitioner that no built-in registers, as
    :func:`fedaug.registry.get` refuses it, from the registrations as written (:mod:`fedaug.cli.declared`,
    no torch); only for a config without plugins, whose names are all built-ins.

    Raises:
        RegistryError: naming the unknown name and the valid choices.
    """
    from fedaug.cli.declared import declared, quoted_in_package
    from fedaug.errors import RegistryError

    for kind, section in COMPONENTS:
        for name in [getattr(config, section).name, *(config.compare if kind == "method" else [])]:
            if quoted_in_package(kind, name):  # the common case, in milliseconds; the registry checks it
                continue
            known = declared(kind)  # parsing every module: a tenth of a second or two
            if name not in known:
                raise RegistryError(f"unknown {kind} {name!r}; valid choices: {', '.join(sorted(known))}")


def config_layers(args: argparse.Namespace) -> tuple[list[str | Path], list[str]]:
    """The command line's config files (the default preset when none) and overrides, in the order they
    apply."""
    overrides = shared_overrides(args)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    names = [m.strip() for m in (getattr(args, "method", None) or "").split(",") if m.strip()]
    check_method_flag(getattr(args, "method", None))
    if names:  # chosen before --set, so that --set method.<option>=... applies to the chosen method
        overrides.append(f"method={names[0]}")
    overrides += args.overrides
    if names:  # --method wins over the preset's and --set's comparison list
        overrides.append(f"compare=[{', '.join(names) if len(names) > 1 else ''}]")
    return list(args.configs or default_presets()), overrides


def check_method_flag(value: str | None) -> None:
    """Refuses a ``--method`` given empty, or with an empty item (``fedavg,,flea``): it would be ignored."""
    from fedaug.errors import ConfigError, shown

    if value is not None and not all(item.strip() for item in value.split(",")):
        raise ConfigError(f"--method must name methods, comma-separated, got {shown(value)}")


def default_presets() -> list[Path]:
    """The main job's preset, ``default`` (packaged: :mod:`fedaug.config.presets`), when no CONFIG is
    given."""
    from fedaug.config.presets import DEFAULT

    return [DEFAULT]


def plot_job(title: str, runs: list[tuple[str, Path]], *, seed: int) -> None:
    """``fedaug run``'s curves as ``curves_seed<k>_<methods>.png`` beside its method dirs, if matplotlib is
    installed (a hint if not). The results are on disk already: a failed plot is a warning, not an error."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        logger.info("pip install 'fedaug[plots]' to get these curves as a figure")
        return
    from fedaug.results.plots import plot_job_curves

    methods = "_".join(dict.fromkeys(label for label, _ in runs))
    path = runs[0][1].parents[1] / f"curves_seed{seed}_{methods}.png"
    if _newer_than_metrics(path, [run_dir for _, run_dir in runs]):  # a finished job run again: no churn
        print(f"curves: {path}")
        return
    try:
        written = plot_job_curves(runs, path, f"{title}: test accuracy")
    except Exception as error:  # any plotting failure: the runs are saved and reported
        logger.warning(
            "could not plot the curves (%s: %s); the results are saved", type(error).__name__, error
        )
        return
    if written is not None:
        print(f"curves: {written}")


def _newer_than_metrics(path: Path, run_dirs: list[Path]) -> bool:
    """Whether ``path`` exists and was written after every run's last logged round."""
    if not path.is_file():
        return False
    metrics = [d / "metrics.jsonl" for d in run_dirs if (d / "metrics.jsonl").is_file()]
    return all(m.stat().st_mtime_ns <= path.stat().st_mtime_ns for m in metrics)


PLUGIN_HELP = (
    "import a module (pkg.mod) or a .py file that registers datasets, models, methods or partitioners "
    "(repeatable; recorded in the run's config.yaml as plugins: [...])"
)


def add_plugin_args(parser: argparse.ArgumentParser) -> None:
    """``--plugin`` on every command: each leaf sub-command parser of ``parser`` (recursively) gets it; a
    parser whose arguments are added when it first parses (``populate``) gets it then."""
    if isinstance(parser, OneLineParser) and parser.then_populate(add_plugin_args):
        return
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        if not any("--plugin" in a.option_strings for a in parser._actions):
            parser.add_argument(
                "--plugin",
                dest="plugins",
                action="append",
                default=[],
                metavar="MODULE|FILE.py",
                help=PLUGIN_HELP,
            )
        return
    for action in actions:
        for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
            add_plugin_args(sub)


def with_plugins(config: ExperimentConfig, plugins: list[str]) -> ExperimentConfig:
    """``config`` with the command line's ``--plugin`` values appended to its ``plugins`` (each once), all
    imported now (a plugin that fails is one error before any run dir is written)."""
    import dataclasses

    from fedaug.plugins import import_plugins

    merged = list(dict.fromkeys([*config.plugins, *plugins]))
    import_plugins(merged)
    return config if merged == config.plugins else dataclasses.replace(config, plugins=merged)
