"""What ``fedaug list`` prints: one line per registered name, or one name's description and options.

What each name is comes from its registration (:func:`fedaug.registry.meta`: the keywords of its ``register``
call, beside its code); its options from its code (:mod:`fedaug.cli.options`). Methods, datasets and models
are listed from their registrations as written in the source (:mod:`fedaug.cli.declared`), so ``fedaug list
methods`` answers without importing torch; partitioners' options and attacks' help come from their code. A
name a plugin registered without metadata lists from its docstring's first line and where it came from.
"""

from __future__ import annotations

import inspect
import textwrap

from fedaug import plugins, registry
from fedaug.cli.declared import declared
from fedaug.cli.options import first_paragraph, options, plain, yaml_value
from fedaug.registry import AttackMeta, DatasetMeta, Meta, MethodMeta, ModelMeta, PartitionerMeta

CONFIG_SECTION = {"method": "method", "dataset": "data", "model": "model", "partitioner": "partition"}
"""The config section whose ``name`` picks a registered name of each kind (``--set data=mnist``)."""

LIST_KINDS = (*registry.KINDS, "preset")
"""What ``fedaug list KIND`` lists: the registry kinds and the packaged presets."""

NEEDS_CODE = ("partitioner", "attack")
"""The kinds whose ``fedaug list KIND`` lines need their registered code (options, help)."""


def kind(word: str) -> str:
    """The kind of :data:`LIST_KINDS` ``word`` names, singular or plural (``datasets`` -> ``dataset``); else
    ``word``."""
    return word[:-1] if word.endswith("s") and word[:-1] in LIST_KINDS else word


def names(kind_: str) -> list[str]:
    """The registered names of ``kind_``: the built-ins (read from their source) and the plugins'."""
    return sorted(set(declared(kind_)) | plugins.user_names(kind_))


def entry(kind_: str, name: str) -> Meta:
    """What ``name`` was registered with; for an entry registered without metadata, what its code says."""
    found = registry.meta(kind_, name)  # an unknown name raises RegistryError naming the valid ones
    return found if found is not None else _from_code(kind_, name)


def _from_code(kind_: str, name: str) -> Meta:
    """Metadata for an entry registered without any: its docstring's first line and where it came from."""
    obj = registry.get(kind_, name)
    where = plugins.origin(obj)
    doc = obj.__doc__ if isinstance(obj, type) or inspect.isfunction(obj) else None
    first = plain(inspect.cleandoc(doc).splitlines()[0]).rstrip(".") if doc and doc.strip() else ""
    summary = first or f"from {where}"
    made: dict[str, Meta] = {
        "method": MethodMeta(summary, where),
        "dataset": DatasetMeta("?", "?", "?", where, "?"),
        "model": ModelMeta(summary, None, None, 0),
        "partitioner": PartitionerMeta(summary),
        "attack": AttackMeta(where),
    }
    return made[kind_]


def _entries(kind_: str) -> dict[str, Meta]:
    """Name -> metadata of every name of ``kind_``, read without importing a built-in where that suffices."""
    if kind_ in NEEDS_CODE:
        return {name: entry(kind_, name) for name in registry.available(kind_)}
    written = declared(kind_)
    return {name: written.get(name) or entry(kind_, name) for name in names(kind_)}


def description(kind_: str, name: str) -> str:
    """The one-line description of ``name`` (what ``fedaug list KIND`` prints after the name)."""
    return _description(kind_, name, entry(kind_, name))


def _description(kind_: str, name: str, meta: Meta) -> str:
    if isinstance(meta, MethodMeta):
        return f"{meta.summary} ({meta.paper})"
    if isinstance(meta, AttackMeta):
        return f"{registry.get('attack', name).help} ({meta.paper})"
    if isinstance(meta, PartitionerMeta | ModelMeta):
        return meta.summary
    return f"{meta.shape}, {meta.size}, {meta.classes} classes, {meta.source}, {meta.license}"


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


def _dataset_row(name: str, meta: Meta) -> list[str]:
    assert isinstance(meta, DatasetMeta)
    return [name, meta.shape, meta.size, meta.classes, meta.source, meta.license]


def _model_row(name: str, meta: Meta) -> list[str]:
    assert isinstance(meta, ModelMeta)
    shape = "any" if meta.input_shape is None else "[" + ",".join(map(str, meta.input_shape)) + "]"
    params = "depends on input" if meta.params is None else f"{meta.params:,}"
    return [name, shape, params, str(meta.default_split), meta.summary]


_TABLE_HEADS = {
    "dataset": (["name", "shape", "train / test", "classes", "source", "license"], _dataset_row),
    "model": (["name", "input", "params", "default split", "description"], _model_row),
}
"""The kinds listed as columns under a header: the header and the row of one name."""


def summary_lines(kind_: str) -> list[str]:
    """``fedaug list KIND``: one line per registered name (datasets and models: columns under a header)."""
    entries = _entries(kind_)
    if kind_ in _TABLE_HEADS:
        head, row = _TABLE_HEADS[kind_]
        return _columns([head, *(row(name, meta) for name, meta in entries.items())])
    lines = []
    for name, meta in entries.items():
        text = _description(kind_, name, meta)
        if kind_ == "partitioner":
            text += f"; options: {_short_options(kind_, name)}"
        lines.append([name, text])
    return _columns(lines)


def preset_lines(name: str) -> list[str]:
    """For a method preset (``flea_official``): the method it builds and each default it changes; else []."""
    from fedaug.methods.parts.preset import MethodPreset  # here: it imports torch

    preset = registry.get("method", name)
    if not isinstance(preset, MethodPreset):
        return []
    base = preset.base_name
    changes = preset.changed_defaults().items()
    return [
        f"a preset of {base}: {base} with these defaults changed",
        *(f"  {option} = {yaml_value(new)} ({base}: {yaml_value(old)})" for option, (old, new) in changes),
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
        doc = first_paragraph(registry.get(kind_, name).config_cls.__doc__) if kind_ == "method" else ""
        return [*lines, doc] if doc else lines
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
    (a sweep with its number of runs) and the first sentence of its header comment."""
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
