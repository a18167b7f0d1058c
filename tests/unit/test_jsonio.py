"""Strict JSON: non-finite floats become null at any depth; the output always parses strictly."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fedaug.runtime import files as jsonio

LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
TREES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


def _refuse(constant: str) -> None:
    raise ValueError(constant)


def _expected(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _expected(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expected(v) for v in value]
    return value


def test_nan_and_infinities_are_null_and_tuples_lists() -> None:
    value = {"std": math.nan, "n": 1, "x": (math.inf, -math.inf, 1.5), "nested": [{"y": math.nan}]}
    text = jsonio.dumps(value, sort_keys=True)
    assert text == '{"n": 1, "nested": [{"y": null}], "std": null, "x": [null, null, 1.5]}'


@given(TREES)
def test_any_tree_round_trips_through_a_strict_parser(value: Any) -> None:
    assert json.loads(jsonio.dumps(value), parse_constant=_refuse) == _expected(value)
