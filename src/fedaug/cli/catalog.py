"""What every registered name is, for ``fedaug list``: one line per name, and each name's options.

The registries (:mod:`fedaug.registry`) hold the objects; this module holds what a user needs to choose among
them, in one table per kind: a method's one-line description and paper, a dataset's shape, size, classes,
source and license, a model's input, parameter count and default split, a partitioner's description and an
attack's paper. ``tests/unit/test_cli_list.py`` checks that every registered name has an entry (so a new
method cannot be forgotten) and that the models' parameter counts and default splits are the built models'.

Options are read from the code itself, never copied here:

* a method's options are the fields of its typed config (``Method.config_cls``; a preset's, such as
  ``flea_official``, is its method's config with the preset's defaults), with their defaults; the
  help of a field is ``field(metadata={"help": ...})`` if given, else its entry in the ``Attributes:``
  section of the docstring of the config class or of a base class (the class nearest in the MRO wins);
* a dataset's, model's or partitioner's options are the keyword arguments with which its registered function
  is called from a config, with their defaults; their help is the ``Args:`` section of its docstring.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fedaug import plugins, registry
from fedaug.errors import ConfigError


@dataclass(frozen=True)
class MethodInfo:
    """A method: what it changes (one line) and the paper it comes from."""

    summary: str
    paper: str


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset: shape of one sample, train / test sizes, classes, where it comes from and its license."""

    shape: str
    size: str
    classes: str
    source: str
    license: str


@dataclass(frozen=True)
class ModelInfo:
    """A model: the input it was built for, its parameters there and its default split layer.

    ``params`` counts the model built for ``input_shape`` and ``num_classes`` (None: depends on the input).
    """

    summary: str
    input_shape: tuple[int, ...] | None
    params: int | None
    default_split: int
    num_classes: int = 10


@dataclass(frozen=True)
class PartitionerInfo:
    """A partitioner: what it does (its options are read from its signature)."""

    summary: str


@dataclass(frozen=True)
class AttackInfo:
    """An attack: the paper it follows (its one-line description is the command's ``help``)."""

    paper: str


_AUGMIX_PAPER = "Fed-AugMix paper; AugMix: Hendrycks et al., ICLR 2020"
_ZDA_PAPER = "Hao et al., CVPR Workshops 2021"
_FLEA_PAPER = "Xia et al., KDD 2024"

METHODS: dict[str, MethodInfo] = {
    "ccvr": MethodInfo(
        "FedAvg, then the server calibrates the classifier on virtual features (pooled class Gaussians)",
        "Luo et al., NeurIPS 2021",
    ),
    "fedaugmix": MethodInfo(
        "FedAvg + two AugMix views per image and a Jensen-Shannon consistency loss", _AUGMIX_PAPER
    ),
    "fedavg": MethodInfo(
        "local cross-entropy training; the server averages the weights by local data size",
        "McMahan et al., AISTATS 2017",
    ),
    "fedbr": MethodInfo(
        "FedAvg + shared label-free sample averages and a min-max local bias reduction",
        "Guo et al., ICML 2023",
    ),
    "feddata": MethodInfo(
        "every client shares 10% of its raw data once; all train on local + shared data (an upper bound)",
        "Zhao et al., arXiv 2018",
    ),
    "feddecorr": MethodInfo(
        "FedAvg + a decorrelation penalty on the penultimate features", "Shi et al., ICLR 2023"
    ),
    "feddecorr_augmix": MethodInfo(
        "FedDecorr + Fed-AugMix's AugMix views and Jensen-Shannon loss", _AUGMIX_PAPER
    ),
    "fedgen": MethodInfo(
        "FedAvg + a server-trained conditional generator whose samples augment local training",
        "Zhu et al., ICML 2021",
    ),
    "fedlc": MethodInfo(
        "FedAvg with logits calibrated by the client's class counts", "Zhang et al., ICML 2022"
    ),
    "fedlc_augmix": MethodInfo("FedLC + Fed-AugMix's AugMix views and Jensen-Shannon loss", _AUGMIX_PAPER),
    "fedmix": MethodInfo(
        "FedAvg + shared averages of sample groups, mixed into every local batch", "Yoon et al., ICLR 2021"
    ),
    "fedntd": MethodInfo("FedAvg + not-true-class distillation", "Lee et al., NeurIPS 2022"),
    "fedntd_augmix": MethodInfo("FedNTD + Fed-AugMix's AugMix views and Jensen-Shannon loss", _AUGMIX_PAPER),
    "fedprox": MethodInfo("FedAvg + a proximal term towards the global weights", "Li et al., MLSys 2020"),
    "fedprox_augmix": MethodInfo(
        "FedProx + Fed-AugMix's AugMix views and Jensen-Shannon loss", _AUGMIX_PAPER
    ),
    "fedrs": MethodInfo(
        "FedAvg with a restricted softmax: logits of the client's missing classes scaled down",
        "Li and Zhan, KDD 2021",
    ),
    "fedrs_augmix": MethodInfo("FedRS + Fed-AugMix's AugMix views and Jensen-Shannon loss", _AUGMIX_PAPER),
    "fedzdac": MethodInfo(
        "FedAvg + zero-shot synthetic samples (ZSDG) added at the clients, for fairness", _ZDA_PAPER
    ),
    "fedzdas": MethodInfo(
        "FedAvg + zero-shot synthetic samples (ZSDG) trained on at the server, for fairness", _ZDA_PAPER
    ),
    "flea": MethodInfo(
        "FedAvg + a shared buffer of features mixed with local activations, distillation and decorrelation",
        _FLEA_PAPER,
    ),
    "flea_eq6": MethodInfo(
        "FLea with the KDD paper's local objective (Eq. 6) exactly as printed", _FLEA_PAPER
    ),
    "flea_official": MethodInfo(
        "FLea with the official code's departures from the paper as defaults", _FLEA_PAPER
    ),
    "moon": MethodInfo(
        "FedAvg + a model-contrastive loss (global vs the client's previous model)", "Li et al., CVPR 2021"
    ),
    "moon_augmix": MethodInfo("MOON + Fed-AugMix's AugMix views and Jensen-Shannon loss", _AUGMIX_PAPER),
    "qffl": MethodInfo(
        "q-FFL trained with q-FedAvg: clients with high loss weigh more, for fairness", "Li et al., ICLR 2020"
    ),
}

DATASETS: dict[str, DatasetInfo] = {
    "arrays": DatasetInfo("yours", "yours", "yours", "your .npz (x_train, y_train, x_test, y_test)", "yours"),
    "csv": DatasetInfo("[features]", "yours", "yours", "your CSV table (feature + label columns)", "yours"),
    "image_folder": DatasetInfo("[3 or 1,H,W]", "yours", "yours", "your folder of class folders", "yours"),
    "cifar10": DatasetInfo(
        "[3,32,32]", "50000 / 10000", "10", "U. Toronto (Krizhevsky, 2009)", "research use"
    ),
    "cifar100": DatasetInfo(
        "[3,32,32]", "50000 / 10000", "100 (or 20)", "U. Toronto (Krizhevsky, 2009)", "research use"
    ),
    "fashion_mnist": DatasetInfo(
        "[1,28,28]", "60000 / 10000", "10", "Zalando (Xiao et al., arXiv 2017)", "MIT"
    ),
    "fsdd": DatasetInfo(
        "[2,64,63]", "2700 / 300", "10", "Free Spoken Digit Dataset (Jackson et al., GitHub)", "CC BY-SA 4.0"
    ),
    "mnist": DatasetInfo("[1,28,28]", "60000 / 10000", "10", "LeCun, Cortes and Burges", "CC BY-SA 3.0"),
    "synthetic": DatasetInfo(
        "any ([1,8,8])", "600 / 200", "10 (any)", "generated Gaussian class blobs", "none (generated)"
    ),
    "uci_har": DatasetInfo(
        "[1,128,3] or [1,128,9]",
        "7352 / 2947",
        "6",
        "UCI (Anguita et al., ESANN 2013), embedded",
        "CC BY 4.0, no commercial use",
    ),
    "urbansound8k": DatasetInfo(
        "[2,64,344] or [40]",
        "8732 clips, 10 folds",
        "10",
        "Zenodo (Salamon et al., ACM MM 2014)",
        "CC BY-NC 3.0",
    ),
}

MODELS: dict[str, ModelInfo] = {
    "audionet": ModelInfo("4 conv blocks for audio spectrograms (FLea papers)", (2, 64, 344), 25_602, 1),
    "bn_cnn_cifar": ModelInfo("Fed-ZDA's CIFAR-10 CNN with BatchNorm", (3, 32, 32), 90_302, 0),
    "bn_cnn_mnist": ModelInfo("Fed-ZDA's MNIST CNN with BatchNorm", (1, 28, 28), 29_034, 0),
    "convnet": ModelInfo("Inverting Gradients' ConvNet (width 64)", (3, 32, 32), 2_904_970, 0),
    "harnet": ModelInfo("4 conv blocks for inertial windows (FLea papers)", (1, 128, 3), 691_974, 1, 6),
    "lenet5": ModelInfo("LeNet-5: 2 conv + 2 fully connected layers", (1, 28, 28), 61_706, 0),
    "mlp": ModelInfo("flatten + hidden layers (hidden_sizes)", None, None, 0),
    "mobilenet_v2_cifar": ModelInfo("MobileNetV2 for 32x32 images (FLea papers)", (3, 32, 32), 2_296_922, 1),
    "resnet18_cifar": ModelInfo("ResNet-18 for 32x32 images", (3, 32, 32), 11_173_962, 1),
    "resnet50_cifar": ModelInfo("ResNet-50 (bottleneck blocks) for 32x32 images", (3, 32, 32), 23_520_842, 1),
}

PARTITIONERS: dict[str, PartitionerInfo] = {
    "dirichlet": PartitionerInfo("Dir(alpha) label skew per class (NIID-Bench hetero-dir)"),
    "iid": PartitionerInfo("shuffled equal split"),
    "multimodal": PartitionerInfo("Fed-ZDA's multimodal non-IID: groups of clients share a class subset"),
    "quantity": PartitionerInfo("Qua(q): every client holds q classes, each split evenly among its holders"),
    "shards": PartitionerInfo("sorted by label, equal shards dealt out (McMahan et al.; Fed-ZDA's unimodal)"),
}

ATTACKS: dict[str, AttackInfo] = {
    "context": AttackInfo(f"{_FLEA_PAPER}, Sec. 4.4"),
    "frontier": AttackInfo(f"reads reconstruct / context outputs; {_FLEA_PAPER}, Sec. 4.4"),
    "invert": AttackInfo("Geiping et al., NeurIPS 2020; Fed-AugMix, Sec. V"),
    "invert-frontier": AttackInfo("reads invert outputs and Fed-AugMix runs; Fed-AugMix, Figs. 4-5"),
    "reconstruct": AttackInfo(f"{_FLEA_PAPER}, Sec. 4.4"),
    "summary": AttackInfo("reads reconstruct / context outputs of several seeds"),
}

TABLES: dict[str, Mapping[str, Any]] = {
    "method": METHODS,
    "dataset": DATASETS,
    "model": MODELS,
    "partitioner": PARTITIONERS,
    "attack": ATTACKS,
}

CONFIG_SECTION = {"method": "method", "dataset": "data", "model": "model", "partitioner": "partition"}
"""The config section whose ``name`` picks a registered name of each kind (``--set data=mnist``)."""

# Arguments the engine passes itself, per kind: not options a user sets.
_ENGINE_ARGS = {
    "dataset": {"ctx"},
    "model": {"num_classes", "input_shape"},
    "partitioner": {"labels", "num_clients", "num_classes", "rng"},
}


@dataclass(frozen=True)
class Option:
    """One option of a registered name: its name, type, default (None: required) and one-line help."""

    name: str
    type: str
    default: str | None
    help: str


LIST_KINDS = (*registry.KINDS, "preset")
"""What ``fedaug list KIND`` lists: the registry kinds and the packaged presets."""


def kind(word: str) -> str:
    """The kind of :data:`LIST_KINDS` ``word`` names, singular or plural (``datasets`` -> ``dataset``); else
    ``word``."""
    return word[:-1] if word.endswith("s") and word[:-1] in LIST_KINDS else word


def plain(text: str) -> str:
    """Docstring text without reST markup: ``:class:`~a.B``` -> ``B``, double back-quotes dropped."""
    text = re.sub(r":[a-z]+:`~?([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return text.replace("``", "")


def docstring_section(doc: str | None, title: str) -> dict[str, str]:
    """The entries of a Google-style docstring section (``Attributes:``, ``Args:``): name -> one-line text.

    An entry is ``name: text`` or ``name (type): text``; deeper-indented lines continue it; the section ends
    at the first line indented no deeper than its title.
    """
    if not doc:
        return {}
    lines = inspect.cleandoc(doc).splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"{title}:"]
    if not starts:
        return {}
    start = starts[0]
    base = _indent(lines[start])
    entries: dict[str, str] = {}
    entry_indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = _indent(line)
        if depth <= base:
            break
        if entry_indent is None:
            entry_indent = depth
        if depth <= entry_indent:
            match = re.match(r"(\*{0,2}\w+)\s*(?:\([^)]*\))?:\s*(.*)$", line.strip())
            current = match.group(1) if match else None
            if match:
                entries[match.group(1)] = match.group(2)
        elif current is not None:
            entries[current] = f"{entries[current]} {line.strip()}".strip()
    return {name: " ".join(plain(text).split()) for name, text in entries.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _value(value: Any) -> str:
    """A default as it is written in a YAML config or ``--set`` (``null``, ``true``, ``[1, 8, 8]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def method_options(name: str) -> list[Option]:
    """The options of method ``name``: its config's fields, defaults and help."""
    return config_options(registry.get("method", name).config_cls)


def config_options(config_cls: type) -> list[Option]:
    """The fields of a config dataclass with their defaults and help (metadata, else ``Attributes:``)."""
    helps: dict[str, str] = {}
    for klass in reversed(config_cls.__mro__):  # the class nearest in the MRO wins
        helps.update(docstring_section(klass.__dict__.get("__doc__"), "Attributes"))
    options = []
    for field in dataclasses.fields(config_cls):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default: str | None = _value(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = _value(field.default_factory())
        else:
            default = None
        text = str(field.metadata.get("help") or helps.get(field.name, ""))
        options.append(Option(field.name, str(field.type), default, text))
    return options


def function_options(kind_: str, name: str) -> list[Option]:
    """The options of a dataset, model or partitioner: its function's keyword arguments a config can set."""
    function: Callable[..., Any] = registry.get(kind_, name)
    helps = docstring_section(function.__doc__, "Args")
    options = []
    for param in inspect.signature(function).parameters.values():
        if param.name in _ENGINE_ARGS[kind_] or param.kind not in (
            param.KEYWORD_ONLY,
            param.POSITIONAL_OR_KEYWORD,
        ):
            continue
        default = None if param.default is param.empty else _value(param.default)
        annotation = "" if param.annotation is param.empty else str(param.annotation)
        options.append(Option(param.name, annotation, default, helps.get(param.name, "")))
    return options


def options(kind_: str, name: str) -> list[Option]:
    """The options of ``name`` of kind ``kind_`` (attacks: none; ``fedaug attack NAME -h`` lists theirs)."""
    if kind_ == "method":
        return method_options(name)
    if kind_ == "attack":
        registry.get(kind_, name)  # an unknown name raises, naming the valid ones
        return []
    return function_options(kind_, name)


def info(kind_: str, name: str) -> Any:
    """The catalog entry of ``name``; ConfigError if the registered name has none (a test prevents that)."""
    registry.get(kind_, name)  # an unknown name raises RegistryError naming the valid ones
    entry = TABLES[kind_].get(name)
    if entry is None and name in plugins.user_names(kind_):
        return _user_entry(kind_, name)
    if entry is None:
        raise ConfigError(f"{kind_} {name!r} has no entry in fedaug.cli.catalog.{kind_.upper()}S")
    return entry


def _user_entry(kind_: str, name: str) -> Any:
    """A catalog entry for a name a plugin registered: where it came from, nothing measured."""
    where = plugins.origin(registry.get(kind_, name))
    entries: dict[str, Any] = {
        "dataset": DatasetInfo("?", "?", "?", where, "?"),
        "model": ModelInfo(f"from {where}", None, None, 0),
        "partitioner": PartitionerInfo(f"from {where}"),
        "method": MethodInfo(f"from {where}", "user code"),
    }
    return entries[kind_]


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _short_options(kind_: str, name: str) -> str:
    parts = [
        f"{opt.name} (required)" if opt.default is None else f"{opt.name}={opt.default}"
        for opt in options(kind_, name)
    ]
    return ", ".join(parts) if parts else "-"


def description(kind_: str, name: str) -> str:
    """The one-line description of ``name`` (what ``fedaug list KIND`` prints after the name)."""
    return _description(kind_, name, info(kind_, name))


def _description(kind_: str, name: str, entry: Any) -> str:
    if isinstance(entry, MethodInfo):
        return f"{entry.summary} ({entry.paper})"
    if isinstance(entry, AttackInfo):
        return f"{registry.get('attack', name).help} ({entry.paper})"
    if isinstance(entry, PartitionerInfo):
        return entry.summary
    if isinstance(entry, ModelInfo):
        return entry.summary
    assert isinstance(entry, DatasetInfo)
    return f"{entry.shape}, {entry.size}, {entry.classes} classes, {entry.source}, {entry.license}"


def summary_lines(kind_: str) -> list[str]:
    """``fedaug list KIND``: one line per registered name (datasets and models: columns under a header).

    Methods, datasets and models are listed from their tables alone, which name exactly the registered ones
    (a test checks): without importing torch. Partitioners' options and attacks' help come from their code.
    """
    if kind_ in TABLELESS_IMPORTS:
        names = registry.available(kind_)
    else:
        names, table = sorted(TABLES[kind_]), TABLES[kind_]
    if kind_ == "dataset":
        rows = [["name", "shape", "train / test", "classes", "source", "license"]]
        for name in names:
            d: DatasetInfo = table[name]
            rows.append([name, d.shape, d.size, d.classes, d.source, d.license])
        return _columns(rows)
    if kind_ == "model":
        rows = [["name", "input", "params", "default split", "description"]]
        for name in names:
            m: ModelInfo = table[name]
            shape = "any" if m.input_shape is None else "[" + ",".join(map(str, m.input_shape)) + "]"
            params = "depends on input" if m.params is None else f"{m.params:,}"
            rows.append([name, shape, params, str(m.default_split), m.summary])
        return _columns(rows)
    if kind_ == "partitioner":
        return _columns(
            [[name, f"{description(kind_, name)}; options: {_short_options(kind_, name)}"] for name in names]
        )
    if kind_ == "method":
        return _columns([[name, _description(kind_, name, table[name])] for name in names])
    return _columns([[name, description(kind_, name)] for name in names])


TABLELESS_IMPORTS = ("partitioner", "attack")
"""The kinds whose ``fedaug list KIND`` lines need their registered code (options, help)."""


def preset_lines(name: str) -> list[str]:
    """For a method preset (``flea_official``): the method it builds and each default it changes; else []."""
    from fedaug.methods.parts.preset import (
        MethodPreset,  # here: importing fedaug.methods registers every method
    )

    preset = registry.get("method", name)
    if not isinstance(preset, MethodPreset):
        return []
    base = preset.base_name
    changes = preset.changed_defaults().items()
    return [
        f"a preset of {base}: {base} with these defaults changed",
        *(f"  {option} = {_value(new)} ({base}: {_value(old)})" for option, (old, new) in changes),
    ]


def detail_lines(kind_: str, name: str, width: int = 100) -> list[str]:
    """``fedaug list KIND NAME``: the description, how to pick it (a preset: what it changes), and every
    option with default and help."""
    lines = [f"{name}: {description(kind_, name)}"]
    if kind_ == "attack":
        return [*lines, f"options: fedaug attack {name} --help"]
    if kind_ == "method":
        lines += preset_lines(name)
    section = CONFIG_SECTION[kind_]
    opts = options(kind_, name)
    use = f"--set {section}={name}" + (f" (or --method {name})" if kind_ == "method" else "")
    if not opts:
        lines.append(f"use: {use}; no options of its own")
        doc = registry.get(kind_, name).config_cls.__doc__ if kind_ == "method" else None
        return [*lines, plain(" ".join(inspect.cleandoc(doc).split("\n\n")[0].split()))] if doc else lines
    lines.append(f"use: {use}, then --set {section}.OPTION=VALUE for these options:")
    for opt in opts:
        head = f"  {opt.name}" + (f" ({opt.type})" if opt.type else "")
        head += " required" if opt.default is None else f" = {opt.default}"
        lines.append(head)
        if opt.help:
            lines += textwrap.wrap(opt.help, width=width, initial_indent="      ", subsequent_indent="      ")
    return lines


def config_preset_lines() -> list[str]:
    """``fedaug list presets``: each packaged preset (:mod:`fedaug.config.presets`), the command that runs it
    (a
    sweep with its number of runs) and the first sentence of its header comment."""
    from fedaug.config import presets
    from fedaug.sweeps.sweep import expand_sweep

    rows = []
    for preset in presets.presets():
        if preset.name.startswith("methods/"):
            use = "method"
        elif presets.has_grid(preset.path):
            use = f"sweep ({len(expand_sweep(preset.path))} runs)"
        else:
            use = "run"
        rows.append((preset.name, use, preset.summary))
    name_width = max(len(name) for name, _, _ in rows)
    use_width = max(len(use) for _, use, _ in rows)
    return [
        f"presets in {presets.PRESET_ROOT} (a checkout's configs/):",
        *(f"{name:<{name_width}}  {use:<{use_width}}  {summary}" for name, use, summary in rows),
        "run: fedaug run NAME; sweep: fedaug sweep NAME (--dry-run lists its runs); method: a method with",
        "its paper's options, merged over a setting: fedaug run default methods/NAME --method NAME.",
        "fedaug list preset NAME prints one; copy it to change more than --set does.",
    ]
