"""``fedaug attack summary``'s figure: what each attack recovers, round by round, one line per setting.

"At which round is it protected?" is the question a privacy page has to answer, and the summary's tables
answer it one row per (target, round). The figure draws the same numbers against the round: on the left the
reconstruction MSE relative to the mean-input baseline (1 = the decoder recovers nothing beyond the average
input; lower leaks more), one line per setting and decoder; on the right the attacker samples needed for 90%
context detection (log scale; a seed that never reached 90% counts as the largest size tried, a lower bound),
one line per setting. Points are the mean over the reports (seeds) and bars the sample std (ddof = 1); one
seed gives a point without a bar.

The numbers come from :func:`fedaug.attacks.aggregate.round_series` (a target's setting is its label without
the trailing `` r<round>`` of the study scripts' labels; targets without a round are left out).
"""

from __future__ import annotations

from pathlib import Path

from fedaug.results.plots import new_figure, save_figure, setting_styles
from fedaug.results.store import Stat

Series = dict[tuple[str, str], dict[int, Stat]]
"""(setting, decoder; ``""`` for the context attack) -> round -> mean and sample std over seeds."""
DECODER_STYLES = {"deep": "-", "conv4": "--"}
"""Line style per decoder (others dotted); the colour is the setting's, the same in both panels."""


def _attacker(name: str) -> str:
    """A reconstruction attacker's legend entry: ``deep decoder``; a baseline's name as it is."""
    return f"{name} decoder" if name in DECODER_STYLES else name


def plot_rounds(recon: Series, context: Series, stem: Path) -> list[Path]:
    """``stem.png`` with both panels and a legend beside them (one colour per setting, one line style per
    decoder); nothing (an empty list) when no setting was attacked at two rounds.

    Args:
        recon: reconstruction MSE / mean-input MSE per (setting, decoder) and round
            (:func:`fedaug.attacks.aggregate.round_series`).
        context: samples for 90% context detection per (setting, ``""``) and round.
    """
    if not any(len(points) > 1 for points in (*recon.values(), *context.values())):
        return []
    settings = list(dict.fromkeys(setting for setting, _ in (*recon, *context)))
    style = setting_styles(settings)
    figure = new_figure(15.0, 4.8)
    grid = figure.add_gridspec(1, 3, width_ratios=(1.0, 1.0, 0.55))
    left, right, key = (figure.add_subplot(grid[0, i]) for i in range(3))
    for axes, series in ((left, recon), (right, context)):
        for (setting, decoder), points in series.items():
            axes.errorbar(
                list(points),
                [s.mean for s in points.values()],
                yerr=[s.spread for s in points.values()],
                color=style[setting][0],
                marker=style[setting][1],
                linestyle=DECODER_STYLES.get(decoder, ":") if decoder else "-",
                capsize=3,
            )
        axes.set_xlabel("attacked round")
        axes.grid(alpha=0.3)
    left.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    left.set(ylabel="MSE / mean-input MSE (1 = nothing recovered)", title="reconstruction")
    right.set(ylabel="attacker samples for 90% detection", title="context identification")
    if context:
        right.set_yscale("log")
    handles = [
        key.plot([], [], color=style[s][0], marker=style[s][1], linestyle="-", label=s)[0] for s in settings
    ]
    decoders = sorted({d for _, d in recon}, key=lambda d: (d not in DECODER_STYLES, d))
    handles += [
        key.plot([], [], color="black", linestyle=DECODER_STYLES.get(d, ":"), label=_attacker(d))[0]
        for d in decoders
    ]
    key.legend(handles=handles, loc="center left", fontsize="x-small", frameon=False)
    key.axis("off")
    title = "attacks by round: mean +- sample std over seeds (higher = more private)"
    figure.suptitle(title, fontsize="medium")
    return save_figure(figure, stem)
