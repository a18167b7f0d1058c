"""Generated fragments (:mod:`tools.results.fragments`): canonical runs, paired gains, wording rules,
marker replacement and naming the cell that differs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedaug.errors import FedaugError
from fedaug.results.store import Run, Stat, load_run
from tools.results.fragments import (
    Gain,
    beats,
    canonical,
    device_class,
    fill_fragments,
    fmt,
    fragment_differences,
    in_every_seed,
    paired_gain,
    read_fragments,
    reproduces,
    reruns,
    seeds_text,
    summary_metric,
    trails,
)

BEST = summary_metric("best_acc")
MakeRun = Callable[..., Path]


def _run(make_run: MakeRun, root: Path, cpu: str | None, **kwargs: object) -> Run:
    path = make_run(root, **kwargs)
    if cpu is not None:
        env = {"cpu_model": cpu} if not cpu.startswith("NVIDIA") else {"device": "cuda:0", "gpu_name": cpu}
        (path / "env.json").write_text(json.dumps(env))
    run = load_run(path)
    assert run is not None
    return run


def test_canonical_prefers_the_reference_cpu_and_keeps_gpus_apart(tmp_path: Path, make_run: MakeRun) -> None:
    xeon = _run(make_run, tmp_path / "a", "Intel Xeon", seed=0, accs=[0.70])
    epyc = _run(make_run, tmp_path / "b", "AMD EPYC", seed=0, accs=[0.60])
    old = _run(make_run, tmp_path / "c", None, seed=1, accs=[0.50])
    gpu = _run(make_run, tmp_path / "d", "NVIDIA H100", seed=0, accs=[0.90])
    runs = [xeon, epyc, old, gpu]
    assert canonical(runs) == {0: epyc, 1: old}  # the EPYC run wins seed 0 though listed second
    assert canonical(runs, "NVIDIA H100") == {0: gpu}
    assert [device_class(r) for r in runs] == ["CPU", "CPU", "CPU", "NVIDIA H100"]
    assert reruns(runs) == [(epyc, xeon)]  # the Xeon run is only a measurement of the CPU's effect


def test_paired_gain_pairs_on_the_same_cpu_and_marks_the_rest(tmp_path: Path, make_run: MakeRun) -> None:
    method = [
        _run(make_run, tmp_path / "m", "Intel Xeon", seed=0, accs=[0.80]),
        _run(make_run, tmp_path / "m", "AMD EPYC", seed=1, accs=[0.70]),
        _run(make_run, tmp_path / "m", "AMD EPYC", seed=2, accs=[0.65]),
    ]
    base = [
        _run(make_run, tmp_path / "b0", "AMD EPYC", seed=0, accs=[0.50]),
        _run(make_run, tmp_path / "b1", "Intel Xeon", seed=0, accs=[0.75]),
        _run(make_run, tmp_path / "b1", None, seed=1, accs=[0.60]),
    ]
    gain = paired_gain(method, base, BEST)
    assert gain.values == pytest.approx({0: 5.0, 1: 10.0})  # seed 0 against the Xeon baseline; no seed 2
    assert gain.cross_cpu == (1,)  # the EPYC run against a baseline whose CPU was not recorded
    assert gain.stat.mean == pytest.approx(7.5) and gain.stat.std == pytest.approx(math.sqrt(12.5))
    with pytest.raises(FedaugError, match="no seed has both"):
        paired_gain(method[2:], base, BEST)


@pytest.mark.parametrize(
    ("values", "beat", "trail", "every"),
    [
        ({0: 3.0, 1: 5.0}, True, False, True),  # mean 4, std 1.41
        ({0: -1.0, 1: 5.0}, False, False, False),  # mean 2, std 4.24: within one std
        ({0: -4.0, 1: -6.0}, False, True, False),
        ({0: 3.0}, None, None, True),  # one seed: no claim
    ],
)
def test_the_wording_rules(
    values: dict[int, float], beat: bool | None, trail: bool | None, every: bool
) -> None:
    gain = Gain(values, ())
    assert beats(gain) is beat and trails(gain) is trail and in_every_seed(gain) is every


def test_reproduces_means_inside_two_sample_stds() -> None:
    assert reproduces(Stat(75.20, 2.48, 3), 75.17) is True
    assert reproduces(Stat(81.57, 0.42, 3), 73.02) is False
    assert reproduces(Stat(70.0, 1.0, 3), 72.0) is True and reproduces(Stat(70.0, 1.0, 3), 72.01) is False
    assert reproduces(Stat(70.0, math.nan, 1), 70.0) is None


def test_formatting() -> None:
    assert fmt(Stat(10.224, 3.1449, 3), sign=True) == "+10.22 ± 3.14"
    assert fmt(Stat(-0.456, 1.72, 3), sign=True) == "-0.46 ± 1.72"
    assert fmt(Stat(98.43, math.nan, 1)) == "98.43"
    assert [seeds_text(s) for s in ([0, 1, 2], [2], [0, 2])] == ["seeds 0-2", "seed 2", "seeds 0, 2"]


def test_fill_replaces_only_marked_bodies_and_names_unknown_markers() -> None:
    text = "intro 1.5\n<!-- results:a -->\nold\n<!-- /results:a -->\nmid\n"
    text += "<!-- results:b -->\n<!-- /results:b -->\n"
    filled = fill_fragments(text, {"a": "| x |\n", "b": "two\n"})
    assert filled == (
        "intro 1.5\n<!-- results:a -->\n| x |\n<!-- /results:a -->\nmid\n"
        "<!-- results:b -->\ntwo\n<!-- /results:b -->\n"
    )
    assert read_fragments(filled) == {"a": "| x |\n", "b": "two\n"}
    assert fill_fragments(filled, {"a": "| x |\n", "b": "two\n"}) == filled
    with pytest.raises(FedaugError, match=r"\['b'\]"):
        fill_fragments(text, {"a": ""})


def test_a_difference_is_named_by_its_row_and_column() -> None:
    generated = "| method | Qua(2) | Dir(0.1) |\n|---|---|---|\n| FedAvg | 73.84 | 58.27 |\nText 17 of 18.\n"
    written = generated.replace("58.27", "57.45").replace("17 of 18", "18 of 18")
    assert fragment_differences("README.md headline", written, generated) == [
        "README.md headline: row 'FedAvg', column 'Dir(0.1)': written '57.45', the archives give '58.27'",
        "README.md headline, line 4: written 'Text 18 of 18.', the archives give 'Text 17 of 18.'",
    ]
    assert fragment_differences("x", generated, generated) == []


@given(st.dictionaries(st.integers(0, 9), st.floats(-50, 50), min_size=2, max_size=6))
def test_a_gain_counts_its_seeds_and_its_verdicts_exclude_each_other(values: dict[int, float]) -> None:
    gain = Gain(values, ())
    assert gain.above_zero() == sum(v > 0 for v in values.values())
    assert not (beats(gain) and trails(gain))
    if beats(gain):
        assert gain.stat.mean > 0
