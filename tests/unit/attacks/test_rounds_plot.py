"""``fedaug attack summary``'s figure by round (:mod:`fedaug.attacks.rounds_plot`): the numbers it draws,
which lines it makes, when it draws nothing, and that the summary page links it."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from fedaug.attacks.aggregate import ContextRecord, ReconRecord, Reports, round_series, setting_of
from fedaug.attacks.rounds_plot import plot_rounds
from fedaug.cli.main import main
from tests.unit.attacks.test_frontier import PART, write_context, write_reconstruct

pytest.importorskip("matplotlib")


def recon(label: str, seed: int, round_: int, attacker: str, mse: float) -> ReconRecord:
    run = ("p", PART, "flea", f"seed{seed}")
    return ReconRecord(label, run, round_, "features", attacker, mse, 0.1, None)


def context(label: str, seed: int, round_: int | None, needed: int | None) -> ContextRecord:
    run = ("p", PART, "flea", f"seed{seed}")
    return ContextRecord(label, run, round_, "features", {100: 0.5, 3000: 0.8}, needed)


def test_setting_is_the_label_without_its_round() -> None:
    assert setting_of("flea lambda2 0 r10", 10) == "flea lambda2 0"
    assert setting_of("flea r1", 1) == "flea"
    assert setting_of("flea r1", 10) == "flea r1"  # another round's suffix is part of the name
    assert setting_of("FedMix, average", 2) == "FedMix, average"


def test_series_are_per_setting_and_decoder_with_the_sample_std_over_seeds() -> None:
    reports = Reports(
        reconstruct=[
            recon("flea r1", 0, 1, "deep", 0.01),
            recon("flea r1", 1, 1, "deep", 0.03),
            recon("flea r10", 0, 10, "deep", 0.05),
            recon("flea r10", 0, 10, "conv4", 0.07),
            recon("flea lambda2 0 r1", 0, 1, "deep", 0.02),
        ],
        context=[
            context("flea r1", 0, 1, 300),
            context("flea r1", 1, 1, None),  # never reached: counted as the largest size tried
            context("shared raw data", 0, None, 100),  # no round: not drawn
        ],
    )
    rec, ctx = round_series(reports)
    assert list(rec) == [("flea", "deep"), ("flea", "conv4"), ("flea lambda2 0", "deep")]
    first = rec[("flea", "deep")][1]  # MSE 0.01, 0.03 over a mean-input MSE of 0.1
    assert (first.n, first.mean) == (2, pytest.approx(0.2))
    assert first.std == pytest.approx(statistics.stdev([0.1, 0.3]))
    assert rec[("flea", "deep")][10].mean == pytest.approx(0.5) and math.isnan(rec[("flea", "deep")][10].std)
    assert list(rec[("flea", "deep")]) == [1, 10]
    assert list(ctx) == [("flea", "")]
    assert ctx[("flea", "")][1].mean == pytest.approx((300 + 3000) / 2)


def test_a_figure_needs_a_setting_attacked_at_two_rounds(tmp_path: Path) -> None:
    one_round = Reports([recon("flea r1", 0, 1, "deep", 0.01), recon("b r1", 0, 1, "deep", 0.02)], [])
    assert plot_rounds(*round_series(one_round), tmp_path / "one") == []
    assert not list(tmp_path.iterdir())
    two_rounds = Reports([*one_round.reconstruct, recon("flea r10", 0, 10, "deep", 0.03)], [])
    assert plot_rounds(*round_series(two_rounds), tmp_path / "two") == [tmp_path / "two.png"]
    assert (tmp_path / "two.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_draws_the_figure_and_links_it(tmp_path: Path) -> None:
    attacks = tmp_path / "attacks"
    run = f"runs/p/{PART}/flea/seed0"
    rows = [("flea r1", run, 1, "features", "deep", 0.01), ("flea r10", run, 10, "features", "deep", 0.02)]
    write_reconstruct(attacks / "rec", rows)
    accs = {"100": [0.95], "1000": [0.99]}
    write_context(attacks / "ctx", {"flea r1": (run, 1, "features", accs, 100)})
    assert main(["attack", "summary", str(attacks), "--out", str(tmp_path / "sum")]) == 0
    assert (tmp_path / "sum" / "summary_rounds.png").is_file()
    assert "![attacks by round](summary_rounds.png)" in (tmp_path / "sum" / "summary.md").read_text()
