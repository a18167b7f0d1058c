"""The libyaml fast path of fedaug.config.yamlio reads every document it takes exactly as the pure-Python
loader does, and hands every other one (aliases possible, errors) to it, so errors read the same."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.config.yamlio import MAX_EXPANDED_NODES, FastLoader, Loader, _fast_load, parse_yaml
from fedaug.errors import ConfigError

pytestmark = pytest.mark.skipif(FastLoader is None, reason="PyYAML without libyaml")

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["1e-9", "2E5", "-1.5e3", "yes", "~", "0x1F", "1_000", "12:30", "a: b", "- x", "#c"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
_YAMLISH = st.text(
    alphabet=st.sampled_from(
        [*"ab1e-+.: \n\r\t[]{},#'\"!?|>%@`~\\x0_&*", "\u00e9", "\u2028", "\x85", "\ufeff"]
    ),
    max_size=60,
)
"""Text of the characters YAML gives a meaning: each divergence ``_NOT_FAST`` lists was found in such text."""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _agrees(text: str) -> None:
    done, fast = _fast_load(text)
    try:
        slow = yaml.load(text, Loader=Loader)
    except (yaml.YAMLError, ValueError, RecursionError):
        assert not done, f"libyaml read {text!r}, which the pure-Python loader refuses"
        return
    if done:
        assert _same(fast, slow), text


@settings(max_examples=150, deadline=None)
@given(_VALUES, st.sampled_from([True, False]))
def test_dumped_documents_read_the_same_by_both_loaders(value: Any, flow: bool) -> None:
    _agrees(yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True))


@settings(max_examples=300, deadline=None)
@given(_YAMLISH)
def test_arbitrary_text_is_read_the_same_or_left_to_the_pure_python_loader(text: str) -> None:
    _agrees(text)


def test_the_fast_path_keeps_yaml_12_floats_and_refuses_what_the_loader_refuses() -> None:
    assert _fast_load("lr: 1e-3\nmu: 2E5\n") == (True, {"lr": 0.001, "mu": 200000.0})
    assert _fast_load("a: &x 1\nb: *x\n") == (False, None)  # aliases: only the counting loader
    assert _fast_load("a: 1\na: 2\n") == (False, None)
    with pytest.raises(
        ConfigError, match=r"malformed YAML in f, line 2, column 1: .*found the key 'a' twice"
    ):
        parse_yaml("a: 1\na: 2\n", "f")
    big = "[" + ", ".join(["0"] * (MAX_EXPANDED_NODES + 1)) + "]"
    assert _fast_load(big) == (False, None)
    with pytest.raises(ConfigError, match="expands to more than 100,000 values"):
        parse_yaml(big, "f")
