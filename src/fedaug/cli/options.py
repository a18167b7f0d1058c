"""The options of a registered name, read from its code (for ``fedaug list KIND NAME``).

Nothing here is kept by hand:

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedaug import registry

ENGINE_ARGS = {
    "dataset": {"ctx"},
    "model": {"num_classes", "input_shape"},
    "partitioner": {"labels", "num_clients", "num_classes", "rng", "groups"},
}
"""Arguments the engine passes itself, per kind: not options a user sets."""


@dataclass(frozen=True)
class Option:
    """One option of a registered name: its name, type, default (None: required) and one-line help."""

    name: str
    type: str
    default: str | None
    help: str


def plain(text: str) -> str:
    """Docstring text without reST markup: ``:class:`~a.B``` -> ``B``, double back-quotes dropped."""
    text = re.sub(r":[a-z]+:`~?([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return text.replace("``", "")


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line, without reST markup ("" for none)."""
    return plain(" ".join(inspect.cleandoc(doc).split("\n\n")[0].split())) if doc else ""


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


def yaml_value(value: Any) -> str:
    """A default as it is written in a YAML config or ``--set`` (``null``, ``true``, ``[1, 8, 8]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
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
            default: str | None = yaml_value(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = yaml_value(field.default_factory())
        else:
            default = None
        text = str(field.metadata.get("help") or helps.get(field.name, ""))
        options.append(Option(field.name, str(field.type), default, text))
    return options


def function_options(kind: str, name: str) -> list[Option]:
    """The options of a dataset, model or partitioner: its function's keyword arguments a config can set."""
    function: Callable[..., Any] = registry.get(kind, name)
    helps = docstring_section(function.__doc__, "Args")
    options = []
    for param in inspect.signature(function).parameters.values():
        if param.name in ENGINE_ARGS[kind] or param.kind not in (
            param.KEYWORD_ONLY,
            param.POSITIONAL_OR_KEYWORD,
        ):
            continue
        default = None if param.default is param.empty else yaml_value(param.default)
        annotation = "" if param.annotation is param.empty else str(param.annotation)
        options.append(Option(param.name, annotation, default, helps.get(param.name, "")))
    return options


def options(kind: str, name: str) -> list[Option]:
    """The options of ``name`` of ``kind`` (attacks: none; ``fedaug attack NAME -h`` lists theirs)."""
    if kind == "method":
        return method_options(name)
    if kind == "attack":
        registry.get(kind, name)  # an unknown name raises, naming the valid ones
        return []
    return function_options(kind, name)
