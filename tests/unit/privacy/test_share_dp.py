"""``method.share_dp``: the clip, the noise's spread, the accountant's epsilon, the budget's stop, the
missing-package line, and DP off equal to no option at all."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fedaug.config.load import build_dataclass, load_config
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.methods.ccvr.method import CCVR, CCVRConfig
from fedaug.methods.ccvr.stats import class_statistics, private_class_statistics
from fedaug.methods.fedbr import FedBR, FedBRConfig
from fedaug.methods.fedmix import FedMix, FedMixConfig
from fedaug.methods.flea.method import FLea, FLeaConfig
from fedaug.methods.parts import share_dp
from fedaug.privacy import gaussian
from fedaug.privacy.gaussian import ShareDPConfig, clip_rows, gaussian_noise
from fedaug.runtime.seeding import torch_generator
from tests.conftest import make_spec
from tests.helpers import killed_in_round

DELTA = 1e-5


def dpa() -> Any:
    return pytest.importorskip("dp_accounting")


def reference_epsilon(noise_multiplier: float, releases: int, delta: float = DELTA) -> float:
    """The accountant's own value: ``releases`` Gaussian mechanisms whose noise std is ``noise_multiplier``
    times the clip, on rows whose replace-one sensitivity is twice the clip."""
    accounting = dpa()
    accountant = accounting.rdp.RdpAccountant()
    accountant.compose(accounting.GaussianDpEvent(noise_multiplier / 2), releases)
    return float(accountant.get_epsilon(delta))


def _run(tmp_path: Path, method: Any, rounds: int = 3) -> tuple[Simulation, list[dict[str, Any]]]:
    sim = Simulation(make_spec(tmp_path, method=method, rounds=rounds, per_round=3))
    sim.run()
    return sim, read_jsonl(tmp_path / "metrics.jsonl")


# --- the mechanism ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(64, 256), (16, 6, 12, 12), (5, 1)])
@pytest.mark.parametrize("clip", [0.1, 1.0, 7.5])
def test_every_clipped_row_is_within_the_clip_and_short_rows_are_untouched(
    shape: tuple[int, ...], clip: float
) -> None:
    generator = torch.Generator().manual_seed(0)
    scales = torch.logspace(-3, 3, shape[0]).view(-1, *([1] * (len(shape) - 1)))
    x = torch.randn(shape, generator=generator) * scales
    clipped = clip_rows(x, clip)
    assert clipped.dtype == x.dtype
    norms = clipped.reshape(shape[0], -1).double().norm(dim=1)  # the released float32 values' exact norms
    assert bool((norms <= clip + 1e-6).all())
    short = x.reshape(shape[0], -1).double().norm(dim=1) <= clip
    assert torch.equal(clipped[short], x[short])
    long = ~short
    assert bool(long.any() and short.any())
    torch.testing.assert_close(norms[long], torch.full_like(norms[long], clip), rtol=1e-6, atol=0)


@pytest.mark.parametrize("std", [0.05, 1.0, 3.0])
def test_the_noise_std_is_the_noise_multiplier_times_the_clip(std: float) -> None:
    # 10^5 draws from a fixed generator; the sample std's standard error is std / sqrt(2 (n - 1)), the
    # mean's std / sqrt(n): both within 3 standard errors.
    n = 100_000
    noise = gaussian_noise((n,), std, torch.Generator().manual_seed(1), torch.empty(0, dtype=torch.float64))
    assert abs(float(noise.std()) - std) <= 3 * std / math.sqrt(2 * (n - 1))
    assert abs(float(noise.mean())) <= 3 * std / math.sqrt(n)


def test_shared_flea_rows_are_clipped_activations_plus_the_clients_noise(tmp_path: Path) -> None:
    # The buffer minus the noise each client drew (its own stream) is every row within the clip; the noise
    # itself has std noise_multiplier * clip.
    dpa()
    clip, sigma = 0.5, 1.5
    flea = FLea(FLeaConfig(share_fraction=0.5, share_dp=ShareDPConfig(clip=clip, noise_multiplier=sigma)))
    sim, records = _run(tmp_path, flea, rounds=2)
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    extra = ckpt["state"]["extra"]
    buffer_x, sources = extra["buffer_x"], extra["buffer_client"]
    assert buffer_x.shape[0] == 30  # floor(0.5 * 20) from each of 3 clients
    for client in sources.unique().tolist():
        rows = buffer_x[sources == client]
        noise = gaussian_noise(
            tuple(rows.shape), sigma * clip, torch_generator(0, "share-dp", 2, client), rows
        )
        norms = (rows - noise).reshape(rows.shape[0], -1).double().norm(dim=1)
        assert bool((norms <= clip + 1e-6).all())
        assert float(norms.max()) > 0.9 * clip  # the mlp's activations are longer than 0.5: clipped
    assert records[-1]["share_dp/noise_multiplier"] == sigma


def test_fedmix_averages_are_of_clipped_inputs_with_noise_scaled_to_one_samples_share(tmp_path: Path) -> None:
    # sensitivity of an average of g clipped inputs: 2 clip / g (replace-one); its noise: sigma clip / g
    dpa()
    clip, sigma, group = 0.3, 2.0, 5
    config = FedMixConfig(mean_group_size=group, share_dp=ShareDPConfig(clip=clip, noise_multiplier=sigma))
    sim, records = _run(tmp_path, FedMix(config), rounds=1)
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    pool_x = ckpt["state"]["extra"]["pool_x"]
    assert pool_x.shape[0] == 3 * (20 // group)
    for client in range(3):
        rows = pool_x[client * 4 : (client + 1) * 4]
        noise = gaussian_noise(
            tuple(rows.shape), sigma * clip / group, torch_generator(0, "share-dp", 0, client), rows
        )
        assert bool(((rows - noise).double().norm(dim=1) <= clip + 1e-6).all())  # an average of clipped rows
    # every sample is in one average at most: one release
    assert records[-1]["share_dp/most_releases"] == 1.0
    assert records[-1]["share_dp/epsilon"] == pytest.approx(reference_epsilon(sigma, 1), rel=1e-12)


# --- the accounting --------------------------------------------------------------------------------------


def test_epsilon_from_the_config_equals_the_accountants_for_a_known_case(tmp_path: Path) -> None:
    # every client in every round shares all its samples: each sample is released once per round
    dpa()
    sigma, rounds = 3.0, 3
    flea = FLea(FLeaConfig(share_fraction=1.0, share_dp=ShareDPConfig(noise_multiplier=sigma, delta=DELTA)))
    _, records = _run(tmp_path, flea, rounds=rounds)
    expected = [reference_epsilon(sigma, r) for r in range(1, rounds + 1)]
    assert [r["share_dp/epsilon"] for r in records] == pytest.approx(expected, rel=1e-12)
    assert [r["share_dp/most_releases"] for r in records] == [1.0, 2.0, 3.0]
    summary = (tmp_path / "summary.json").read_text()
    assert f'"share_dp_epsilon": {expected[-1]!r}' in summary.replace("\n", "").replace("  ", " ")


def test_an_epsilon_alone_calibrates_the_noise_to_spend_it_over_the_planned_releases() -> None:
    dpa()
    for epsilon, releases in ((8.0, 1), (4.0, 5), (1.0, 30)):
        mech = gaussian.resolve(ShareDPConfig(epsilon=epsilon, releases=releases))
        assert mech is not None
        spent = reference_epsilon(mech.noise_multiplier, releases)
        assert spent <= epsilon
        assert spent == pytest.approx(epsilon, rel=1e-4)
        assert mech.max_releases == releases
        assert reference_epsilon(mech.noise_multiplier, releases + 1) > epsilon


def test_the_budget_allows_the_releases_the_accountant_allows() -> None:
    dpa()
    sigma = 4.0
    budget = reference_epsilon(sigma, 7) + 1e-9
    mech = gaussian.resolve(ShareDPConfig(noise_multiplier=sigma, epsilon=budget))
    assert mech is not None and mech.max_releases == 7
    unbounded = gaussian.resolve(ShareDPConfig(noise_multiplier=sigma))
    assert unbounded is not None and unbounded.max_releases == gaussian.MAX_RELEASES


def test_sharing_stops_at_the_budget_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sigma = 3.0
    budget = reference_epsilon(sigma, 2) + 1e-9  # two releases of a sample
    config = ShareDPConfig(noise_multiplier=sigma, epsilon=budget)
    flea = FLea(FLeaConfig(share_fraction=1.0, share_dp=config))
    with caplog.at_level(logging.WARNING, logger="fedaug.methods.parts.share_dp"):
        sim, records = _run(tmp_path, flea, rounds=5)
    assert len(records) == 5  # the run goes on
    spent = [r["share_dp/epsilon"] for r in records]
    assert spent[2:] == [spent[1]] * 3 and spent[1] <= budget
    assert [r["share_dp/most_releases"] for r in records] == [1.0, 2.0, 2.0, 2.0, 2.0]
    stops = [r for r in caplog.records if "sharing stops" in r.getMessage()]
    assert (
        len(stops) == 1 and stops[0].levelno == logging.WARNING and "after round 2" in stops[0].getMessage()
    )
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    assert ckpt["state"]["extra"]["buffer_round"].unique().tolist() == [2]  # the last features shared
    ledger = ckpt["state"]["extra"][share_dp.COUNTS]
    assert all(bool((counts == 2).all()) for counts in ledger.values())


def test_a_budget_below_one_release_shares_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sigma = 1.0
    config = ShareDPConfig(noise_multiplier=sigma, epsilon=0.5 * reference_epsilon(sigma, 1))
    with caplog.at_level(logging.WARNING, logger="fedaug.methods.parts.share_dp"):
        _, records = _run(tmp_path, FedMix(FedMixConfig(share_dp=config)), rounds=2)
    assert [r["fedmix/pool_size"] for r in records] == [0.0, 0.0]
    assert [r["share_dp/epsilon"] for r in records] == [0.0, 0.0]
    assert any("nothing will be shared" in r.getMessage() for r in caplog.records)


def test_withheld_samples_are_counted_and_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # fresh half subsets with one release each: samples drawn again are withheld, not re-released
    sigma = 3.0
    config = ShareDPConfig(noise_multiplier=sigma, epsilon=reference_epsilon(sigma, 1) + 1e-9)
    flea = FLea(FLeaConfig(share_fraction=0.5, share_dp=config))
    with caplog.at_level(logging.WARNING, logger="fedaug.methods.parts.share_dp"):
        sim, records = _run(tmp_path, flea, rounds=4)
    assert records[0]["share_dp/withheld"] == 0.0
    assert sum(r["share_dp/withheld"] for r in records) > 0
    assert all(r["share_dp/most_releases"] == 1.0 for r in records)
    assert sum("withheld from now on" in r.getMessage() for r in caplog.records) == 1
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    assert all(int(c.max()) <= 1 for c in ckpt["state"]["extra"][share_dp.COUNTS].values())


# --- the config, the missing package and DP off ----------------------------------------------------------


def test_a_missing_accountant_fails_before_the_run_with_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedaug.runs.resolve import build_method

    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # import dp_accounting raises ImportError
    gaussian.gaussian_epsilon.cache_clear()
    for method in ("flea", "fedmix", "fedbr", "ccvr"):
        config = load_config(overrides=[f"method={method}", "method.share_dp.epsilon=4"])
        with pytest.raises(ConfigError) as info:
            build_method(config)
        message = str(info.value)
        assert "pip install 'fedaug[privacy]'" in message and "\n" not in message
    # off, nothing is imported
    assert build_method(load_config(overrides=["method=flea"])).dp is None  # type: ignore[attr-defined]
    gaussian.gaussian_epsilon.cache_clear()


def test_the_config_is_under_the_method_and_validated() -> None:
    config = build_dataclass(
        FLeaConfig, {"share_dp": {"epsilon": 4, "delta": 1e-6, "clip": 2}}, path="method"
    )
    assert config.share_dp == ShareDPConfig(epsilon=4.0, delta=1e-6, clip=2.0)
    assert not build_dataclass(
        FedMixConfig, {"share_dp": {"epsilon": math.inf}}, path="method"
    ).share_dp.enabled
    for bad, key in (({"delta": 1.5}, "delta"), ({"clip": 0}, "clip"), ({"epsilon": -1}, "epsilon")):
        with pytest.raises(ConfigError, match=f"method.share_dp.{key}"):
            build_dataclass(FLeaConfig, {"share_dp": bad}, path="method")
    loaded = load_config(overrides=["method=flea", "method.share_dp.epsilon=.inf"])
    assert loaded.method.options == {"share_dp": {"epsilon": math.inf}}


@pytest.mark.parametrize(
    "make",
    [
        lambda c: FLea(FLeaConfig(share_fraction=0.5, share_dp=c)),
        lambda c: FedMix(FedMixConfig(share_dp=c)),
        lambda c: FedBR(FedBRConfig(share_dp=c)),
        lambda c: CCVR(CCVRConfig(share_dp=c)),
        lambda c: CCVR(CCVRConfig(variant="shared_features", calibrate_every_round=True, share_dp=c)),
    ],
)
def test_dp_off_equals_no_option_bit_for_bit(tmp_path: Path, make: Any) -> None:
    off = build_dataclass(ShareDPConfig, {"epsilon": math.inf, "delta": 1e-3, "clip": 9.0}, path="x")
    plain = make(ShareDPConfig())
    explicit = make(off)
    assert plain.dp is None and explicit.dp is None
    sim_a, records_a = _run(tmp_path / "a", plain)
    sim_b, records_b = _run(tmp_path / "b", explicit)
    assert records_a == records_b
    assert not any(key.startswith("share_dp") for key in records_a[-1])
    state_a, state_b = sim_a.store.load_checkpoint(), sim_b.store.load_checkpoint()
    assert state_a is not None and state_b is not None
    for key, value in state_a["state"]["model_state"].items():
        assert torch.equal(value, state_b["state"]["model_state"][key]), key
    assert share_dp.COUNTS not in state_a["state"]["extra"]
    assert "share_dp_epsilon" not in (tmp_path / "a" / "summary.json").read_text()


def test_a_private_flea_run_resumes_identically(tmp_path: Path) -> None:
    # the ledger rides in the checkpoint (weights-only load): an interrupted run spends what a whole one does
    dpa()
    config = FLeaConfig(share_fraction=0.5, share_dp=ShareDPConfig(noise_multiplier=3.0, epsilon=8.0))
    Simulation(make_spec(tmp_path / "full", method=FLea(config), rounds=4)).run()
    killed = killed_in_round(FLea, config, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        Simulation(make_spec(tmp_path / "cut", method=killed, rounds=4)).run()
    Simulation(make_spec(tmp_path / "cut", method=FLea(config), rounds=4)).run()
    for name in ("metrics.jsonl", "summary.json"):
        assert (tmp_path / "cut" / name).read_text() == (tmp_path / "full" / name).read_text()


# --- FedBR's averages and CCVR's features and statistics --------------------------------------------------


class _KeptShares(CCVR):
    """CCVR that keeps the last shares it received (what the clients uploaded)."""

    kept: list[Any]

    def receive_shares(self, state: Any, shares: Any, run: Any) -> Any:
        self.kept = list(shares)
        return super().receive_shares(state, shares, run)


def test_fedbr_averages_are_of_clipped_inputs_with_noise_scaled_to_one_samples_share(tmp_path: Path) -> None:
    dpa()
    clip, sigma, group = 0.3, 2.0, 4
    config = FedBRConfig(
        average_size=group, num_pseudo=100, share_dp=ShareDPConfig(clip=clip, noise_multiplier=sigma)
    )
    sim, records = _run(tmp_path, FedBR(config), rounds=1)
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    pool_x, pool_y = ckpt["state"]["extra"]["pool_x"], ckpt["state"]["extra"]["pool_y"]
    assert pool_x.shape[0] == 3 * (20 // group)  # num_pseudo above the pool: all kept, in client order
    assert torch.equal(pool_y, torch.full_like(pool_y, 1 / 3))  # no labels leave the client
    for client in range(3):
        rows = pool_x[client * 5 : (client + 1) * 5]
        noise = gaussian_noise(
            tuple(rows.shape), sigma * clip / group, torch_generator(0, "share-dp", 0, client), rows
        )
        norms = (rows - noise).double().norm(dim=1)
        assert bool((norms <= clip + 1e-6).all()) and float(norms.max()) > 0.5 * clip
    assert records[-1]["share_dp/most_releases"] == 1.0
    assert records[-1]["share_dp/epsilon"] == pytest.approx(reference_epsilon(sigma, 1), rel=1e-12)


def test_ccvr_shared_features_are_clipped_plus_noise_and_accounted_per_calibration(tmp_path: Path) -> None:
    dpa()
    clip, sigma = 0.5, 1.5
    config = CCVRConfig(
        variant="shared_features",
        share_fraction=0.5,
        calibrate_every_round=True,
        share_dp=ShareDPConfig(clip=clip, noise_multiplier=sigma),
    )
    ccvr = _KeptShares(config)
    _, records = _run(tmp_path, ccvr, rounds=3)
    for share in ccvr.kept:
        rows = share.extra["x"]
        assert rows.shape == (10, 256)  # floor(0.5 * 20) penultimate features of the mlp
        noise = gaussian_noise(
            tuple(rows.shape), sigma * clip, torch_generator(0, "share-dp", 3, share.client_id), rows
        )
        norms = (rows - noise).double().norm(dim=1)
        assert bool((norms <= clip + 1e-6).all()) and float(norms.max()) > 0.9 * clip
    # fresh half subsets every round: the most-released sample's epsilon, the accountant's own
    most = [r["share_dp/most_releases"] for r in records]
    assert most == sorted(most) and most[0] == 1.0
    assert [r["share_dp/epsilon"] for r in records] == pytest.approx(
        [reference_epsilon(sigma, int(m)) for m in most], rel=1e-12
    )


def test_ccvr_post_hoc_statistics_spend_one_release(tmp_path: Path) -> None:
    dpa()
    sigma = 2.0
    ccvr = _KeptShares(CCVRConfig(share_dp=ShareDPConfig(clip=0.5, noise_multiplier=sigma)))
    _, records = _run(tmp_path, ccvr, rounds=2)
    assert "share_dp/epsilon" not in records[0]  # rounds before the calibration log FedAvg's metrics
    assert records[1]["share_dp/most_releases"] == 1.0
    assert records[1]["share_dp/epsilon"] == pytest.approx(reference_epsilon(sigma, 1), rel=1e-12)
    assert {"classes", "counts", "means", "covs"} <= set(ccvr.kept[0].extra)
    summary = (tmp_path / "summary.json").read_text()
    assert "share_dp_epsilon" in summary


def test_private_class_statistics_are_those_of_clipped_features_plus_the_stated_noise() -> None:
    # Prepare: features far longer than the clip, two classes
    clip, sigma, dim = 0.5, 1.0, 3
    generator = torch.Generator().manual_seed(0)
    features = 10 * torch.randn(12, dim, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 1] * 6)
    exact = class_statistics(clip_rows(features, clip), labels)
    # Execute: many noisy releases; the noise on sums and second moments read back from mean and cov
    sums, seconds = [], []
    for seed in range(1500):
        classes, counts, means, covs = private_class_statistics(
            features, labels, clip=clip, noise_multiplier=sigma, generator=torch.Generator().manual_seed(seed)
        )
        n = counts[:, None].double()
        sums.append(means * n - exact[2] * n)
        outer = means[:, :, None] * means[:, None, :]
        exact_outer = exact[2][:, :, None] * exact[2][:, None, :]
        seconds.append((n[:, :, None] - 1) * (covs - exact[3]) + n[:, :, None] * (outer - exact_outer))
    # Assert: classes and counts in the clear; every clipped mean within the clip; noise std as stated
    assert classes.tolist() == [0, 1] and counts.tolist() == [6, 6]
    assert bool((exact[2].norm(dim=1) <= clip + 1e-9).all())
    sum_noise, second_noise = torch.stack(sums), torch.stack(seconds)
    torch.testing.assert_close(second_noise, second_noise.transpose(-1, -2))  # one draw per upper entry
    upper = second_noise[..., *torch.triu_indices(dim, dim)]
    assert sum_noise.numel() == 1500 * 2 * dim and upper.numel() == 1500 * 2 * dim * (dim + 1) // 2
    for noise, std in (
        (sum_noise.flatten(), sigma * clip * 2**0.5),
        (upper.flatten(), sigma * clip**2),
    ):
        count = noise.numel()
        assert abs(float(noise.std()) - std) <= 3 * std / math.sqrt(2 * (count - 1))
        assert abs(float(noise.mean())) <= 3 * std / math.sqrt(count)
