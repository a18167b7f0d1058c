"""YAML alias bombs (issue 68): a document under the alias count whose aliases of aliases expand to gigabytes
is refused in one line naming the file and the limit, at once, before any Python object is built
(fedaug.config.yamlio bounds the expansion, not only the count).

Before: a bomb of 63 aliases under ``method:`` took about a minute and gigabytes in ``dataclasses.asdict``,
and a recursive alias (``&a [*a]``) ended in a RecursionError traceback.

Settings of the property: ``max_examples`` 60 in the default suite, 1000 under ``-m slow``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaug.cli.main import main
from fedaug.config.load import load_config
from fedaug.config.yamlio import (
    MAX_ALIASES,
    MAX_EXPANDED_NODES,
    MAX_EXPANDED_TEXT,
    parse_yaml,
    read_yaml_file,
)
from fedaug.errors import ConfigError
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
QUICK = 1.0
"""CPU seconds (of this process: other processes on a busy machine do not count) a refusal may take; each
measured well under 0.3 s."""

NODES = f"expands to more than {MAX_EXPANDED_NODES:,} values"
TEXT = f"expands to more than {MAX_EXPANDED_TEXT:,} characters of text"


def _nested(kind: str, depth: int, width: int, indent: str = "") -> str:
    """Anchors ``l0`` .. ``l{depth}``, each holding ``width`` aliases of the one before (list or mapping)."""
    lines = [f"{indent}l0: &l0 [{', '.join(['x'] * width)}]"]
    for level in range(1, depth + 1):
        prev = f"*l{level - 1}"
        items = [prev] * width if kind == "list" else [f"k{i}: {prev}" for i in range(width)]
        brackets = "[]" if kind == "list" else "{}"
        lines.append(f"{indent}l{level}: &l{level} {brackets[0]}{', '.join(items)}{brackets[1]}")
    return "\n".join(lines) + "\n"


BOMBS = [
    # (id, document text, what the one error line says)
    ("lists-9x7", _nested("list", 7, 9), NODES),  # 63 aliases, 9^8 = 43 million values
    ("mappings-9x7", _nested("map", 7, 9), NODES),
    ("lists-2x60", _nested("list", 60, 2), NODES),  # 120 > 100 aliases: the count refuses it first
    ("lists-3x40", _nested("list", 40, 3)[: _nested("list", 40, 3).index("l34:")], NODES),  # 99 aliases
    ("long-string", "s: &s " + "y" * 400_000 + "\nt: [*s, *s, *s]\n", TEXT),
    (
        "merge-keys",
        "a: &a {"
        + ", ".join(f"k{i}: [{', '.join(['x'] * 999)}]" for i in range(2))
        + "}\n"
        + "".join(f"b{i}: {{<<: *a}}\n" for i in range(90)),
        NODES,
    ),
    ("wide-shallow", "a: &a [" + ", ".join(["x"] * 1300) + "]\nb: [" + ", ".join(["*a"] * 80) + "]\n", NODES),
    ("recursive", "a: &a [x, *a]\n", "contains an alias of itself"),
    ("recursive-mapping", "a: &a {b: {c: *a}}\n", "contains an alias of itself"),
]


@pytest.mark.parametrize(("text", "expected"), [b[1:] for b in BOMBS], ids=[b[0] for b in BOMBS])
def test_an_alias_bomb_is_refused_at_once_naming_the_file_and_the_limit(
    tmp_path: Path, text: str, expected: str
) -> None:
    # Prepare
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    # Execute
    start = time.process_time()
    with pytest.raises(ConfigError) as error:
        read_yaml_file(path)
    elapsed = time.process_time() - start
    # Assert
    message = str(error.value)
    assert message.startswith(f"malformed YAML in {path}, line "), message
    assert expected in message or f"more than {MAX_ALIASES} aliases" in message, message
    assert "\n" not in message and elapsed < QUICK, (message, elapsed)


def test_a_bomb_in_a_configs_options_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: the shape that took about a minute: method options are free-form, so the bomb reached the
    # config's dataclasses.asdict (an expansion without memory of shared lists)
    path = tmp_path / "c.yaml"
    path.write_text("method:\n  name: fedavg\n  bomb:\n" + _nested("list", 7, 9, indent="    "))
    # Execute
    start = time.process_time()
    code = main(["run", str(path), "--out-dir", str(tmp_path / "runs")])
    elapsed = time.process_time() - start
    # Assert
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"{path}, line 9, column 9" in err[0] and NODES in err[0], err[0]
    assert elapsed < QUICK and not (tmp_path / "runs").exists()


def test_a_bomb_in_a_set_value_names_the_override() -> None:
    anchors = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    anchors += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    bomb = "[" + ", ".join(anchors)
    with pytest.raises(ConfigError, match=r"--set 'method\.x=.*expands to more than 100,000 values"):
        load_config([SMOKE], [f"method.x={bomb}]"])


def _root_plus_copies(width: int, copies: int, extra: int) -> str:
    """A top-level list: an anchored list of ``width`` scalars, ``copies`` aliases, ``extra`` scalars."""
    return "\n".join([f"- &a [{', '.join(['x'] * width)}]", *["- *a"] * copies, *["- y"] * extra]) + "\n"


def test_the_limit_is_exact_on_the_expanded_values() -> None:
    # 1 root + 41 copies of a list of 2438 scalars (2439 values each) = 100,000 values, with 40 aliases
    at_limit = parse_yaml(_root_plus_copies(2438, 40, 0), "doc")
    assert len(at_limit) == 41 and 1 + sum(1 + len(item) for item in at_limit) == MAX_EXPANDED_NODES
    with pytest.raises(ConfigError, match="doc, line 1, column 1: the document expands to more than 100,000"):
        parse_yaml(_root_plus_copies(2438, 40, 1), "doc")


def _expanded_size(value: Any) -> tuple[int, int]:
    """The reference: values and scalar characters of a built Python object, walked without memory."""
    if isinstance(value, dict):
        sizes = [_expanded_size(part) for pair in value.items() for part in pair]
    elif isinstance(value, list):
        sizes = [_expanded_size(item) for item in value]
    else:
        return 1, len(str(value))
    return 1 + sum(n for n, _ in sizes), sum(t for _, t in sizes)


LAYERS = st.lists(st.tuples(st.sampled_from(["list", "map"]), st.integers(1, 12)), min_size=1, max_size=9)


def _layered(layers: list[tuple[str, int]]) -> tuple[str, int, int, int]:
    """A document of anchored layers, each aliasing the one before, with its expected (aliases, values, text)
    computed by arithmetic, not by YAML."""
    lines, aliases, values, text = [], 0, 1, 0
    size = (0, 0)
    for level, (kind, width) in enumerate(layers):
        key = f"l{level}"
        if level == 0:
            body, size = "[" + ", ".join(["xyz"] * width) + "]", (1 + width, 3 * width)
        elif kind == "list":
            body = "[" + ", ".join([f"*l{level - 1}"] * width) + "]"
            size, aliases = (1 + width * size[0], width * size[1]), aliases + width
        else:
            keys = [f"k{i}" for i in range(width)]
            body = "{" + ", ".join(f"{k}: *l{level - 1}" for k in keys) + "}"
            size = (1 + width * (1 + size[0]), sum(len(k) for k in keys) + width * size[1])
            aliases += width
        lines.append(f"{key}: &{key} {body}")
        values, text = values + 1 + size[0], text + len(key) + size[1]
    return "\n".join(lines) + "\n", aliases, values, text


def _check_layers(layers: list[tuple[str, int]]) -> None:
    document, aliases, values, text = _layered(layers)
    start = time.process_time()
    try:
        loaded = parse_yaml(document, "doc")
    except ConfigError as error:
        assert time.process_time() - start < QUICK
        assert aliases > MAX_ALIASES or values > MAX_EXPANDED_NODES or text > MAX_EXPANDED_TEXT, error
        return
    assert aliases <= MAX_ALIASES and values <= MAX_EXPANDED_NODES and text <= MAX_EXPANDED_TEXT
    assert _expanded_size(loaded) == (values, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LAYERS)
def test_a_layered_document_is_loaded_exactly_when_its_expansion_is_within_the_limits(
    layers: list[tuple[str, int]],
) -> None:
    _check_layers(layers)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LAYERS)
def test_layered_documents_long(layers: list[tuple[str, int]]) -> None:
    _check_layers(layers)
