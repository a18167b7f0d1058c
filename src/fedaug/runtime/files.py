"""Strict JSON for the summaries fedaug writes: a statistic that does not exist is ``null``, never ``NaN``.

Python's :func:`json.dumps` writes ``NaN`` and ``Infinity`` by default, which no strict JSON parser accepts
(``jq``, browsers, JavaScript's ``JSON.parse``). A summary's sample std over one seed is NaN
(:func:`fedaug.results.store.aggregate`); :func:`dumps` writes it as ``null``, and refuses anything else that
is not JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with each NaN or infinite float, in dicts, lists and tuples at any depth, made None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``value`` with ``allow_nan=False``: always strict JSON."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
