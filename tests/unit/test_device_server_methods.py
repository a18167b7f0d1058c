"""FedAvg's family, CCVR, FedGen, q-FFL and model shape inference on another device than the CPU: outputs stay
on their inputs' device, and random draws come from the CPU generators with the same numbers on every device.

No GPU is needed: the meta device mixes with the CPU as CUDA does ("Tensor on device cpu is not on the
expected device meta"), so a tensor created on the CPU where it meets device tensors fails here too (in-place
ops into a CPU tensor do not raise on meta, so the tests check where results live). Data-dependent steps
(``float()``, ``.item()``) do not run on meta; those paths are checked on the CPU against the numbers the
code gave before it was made device-aware.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from fedaug.api import RunContext
from fedaug.methods.ccvr.method import CCVR
from fedaug.methods.ccvr.stats import ClassStatistics, class_statistics, pool_statistics, sample_virtual
from fedaug.methods.fedgen import ConditionalGenerator, FedGen, FedGenConfig, draw_latents
from fedaug.methods.fedlc import FedLC, FedLCConfig
from fedaug.methods.fedrs import FedRS, FedRSConfig
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.methods.qffl import combine, mean_loss, squared_distance
from fedaug.models import build_model
from fedaug.models._layers import output_shape
from tests.unit.methods.helpers import client_context, initial_state, mlp_fn, payload, skewed_client

META = torch.device("meta")


def _meta_state(value: float) -> dict[str, torch.Tensor]:
    return {
        "w": torch.full((2, 3), value, device=META),
        "bn.num_batches_tracked": torch.zeros((), dtype=torch.long, device=META),
    }


def test_mixing_the_cpu_with_meta_fails_as_with_cuda() -> None:
    # The premise of this file: a CPU tensor created without device= fails where it meets device tensors.
    with pytest.raises(RuntimeError, match="not on the expected device meta"):
        torch.zeros(3, device=META) + torch.ones(3)


def test_aggregation_keeps_the_states_on_their_device() -> None:
    states = [_meta_state(1.0), _meta_state(3.0)]
    averaged = weighted_average(states, [1, 3])
    combined = combine(_meta_state(0.0), states, [0.25, 0.5])
    for result in (averaged, combined):
        assert {t.device for t in result.values()} == {META}
        assert result["w"].dtype == torch.float32 and result["bn.num_batches_tracked"].dtype == torch.long


@pytest.mark.parametrize(
    "method", [FedLC(FedLCConfig(calibration_tau=1.0)), FedRS(), FedRS(FedRSConfig(scale_bias=False))]
)
def test_logit_adjustments_live_on_the_model_device(method: FedLC | FedRS) -> None:
    # Prepare: the client's data on the CPU (its class counts are counted there), its model on meta
    x, y = skewed_client()
    ctx = client_context(x, y)
    ctx.model.to(META)
    # Execute: the loss on meta inputs
    loss = method.loss_fn(payload(initial_state(mlp_fn())), ctx)
    out = loss(ctx.model, x.to(META), y.to(META))
    # Assert: the shift / restriction met the meta logits without a device error
    assert out.loss.device == META and out.logs["ce"].device == META


def test_ccvr_keeps_its_empty_classifier_on_the_state_device() -> None:
    state = {k: v.to(META) for k, v in initial_state(mlp_fn()).items()}
    run = RunContext(num_clients=2, num_classes=3, input_shape=(8,), seed=0, num_rounds=2, device=META)
    extra = CCVR().init_server(state, run).extra
    assert extra["classifier_weight"].device == META and extra["classifier_bias"].device == META


def _pooled() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    features = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(40) % 3
    classes, counts, means, covs = class_statistics(features, labels)
    share = ClassStatistics(classes, counts, means.float(), covs.float())
    return pool_statistics([share], num_classes=4)


def test_virtual_features_are_drawn_on_the_cpu_then_moved() -> None:
    counts, means, covs = _pooled()
    gen_cpu, gen_meta = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    features, labels = sample_virtual(counts, means, covs, 5, gen_cpu)
    meta_features, meta_labels = sample_virtual(counts, means, covs, 5, gen_meta, META)
    # On meta: the features and labels are there, and the CPU generator drew exactly what the CPU run drew
    assert meta_features.device == META and meta_labels.device == META
    assert meta_features.shape == features.shape == (15, 3) and meta_labels.shape == labels.shape
    assert torch.equal(gen_cpu.get_state(), gen_meta.get_state())
    # On the CPU: mean + noise @ root^T with the noise of the CPU generator in float64, as always
    reference_gen = torch.Generator().manual_seed(7)
    expected = []
    for c in range(3):
        eigenvalues, eigenvectors = torch.linalg.eigh(covs[c])
        root = eigenvectors * eigenvalues.clamp_min(0).sqrt()
        noise = torch.randn(5, 3, generator=reference_gen, dtype=torch.float64)
        expected.append((means[c] + noise @ root.T).float())
    assert torch.equal(features, torch.cat(expected))
    assert torch.equal(labels, torch.arange(3).repeat_interleave(5))


def test_fedgen_latents_are_the_cpu_generator_draws_on_any_device() -> None:
    stream, reference = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    y, z = draw_latents(stream, 5, 4, 6, "cpu")
    # The same numbers as drawing the classes, then the noise, straight from the generator
    assert torch.equal(y, torch.randint(5, (6,), generator=reference))
    assert torch.equal(z, torch.randn(6, 4, generator=reference))
    meta_stream = torch.Generator().manual_seed(3)
    y_meta, z_meta = draw_latents(meta_stream, 5, 4, 6, META)
    assert y_meta.device == META and z_meta.device == META and y_meta.dtype == torch.long
    assert torch.equal(meta_stream.get_state(), stream.get_state())


def test_fedgen_builds_its_generator_on_the_cpu_then_moves_it() -> None:
    method = FedGen(FedGenConfig(noise_dim=4, generator_width=8))
    run = RunContext(num_clients=1, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)
    on_cpu = method.build_generator(run, torch.Generator().manual_seed(5))
    direct = ConditionalGenerator((8,), 3, 4, 8, torch.Generator().manual_seed(5))
    expected = direct.state_dict()
    assert all(torch.equal(value, expected[key]) for key, value in on_cpu.state_dict().items())
    on_meta = method.build_generator(replace(run, device=META), torch.Generator().manual_seed(5))
    assert {p.device for p in on_meta.parameters()} == {META}
    out = on_meta(*draw_latents(torch.Generator().manual_seed(0), 3, 4, 2, META))
    assert out.device == META and out.shape == (2, 8)


def test_qffl_sums_read_once_round_as_python_floats() -> None:
    # The float64 accumulation on the device equals summing the float32 values as Python floats (as before).
    model = build_model("mlp", num_classes=3, input_shape=(8,))
    x, y = skewed_client(num=40, classes=(0, 1, 2))
    expected_loss = 0.0
    model.eval()
    with torch.no_grad():
        for start in range(0, y.shape[0], 7):
            logits = model(x[start : start + 7])
            expected_loss += float(nn.functional.cross_entropy(logits, y[start : start + 7], reduction="sum"))
    model.train()
    assert mean_loss(model, x, y, batch_size=7) == expected_loss / y.shape[0]
    moved = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()}
    expected = sum(float((moved[n] - p.detach()).pow(2).sum()) for n, p in model.named_parameters())
    assert squared_distance(moved, model) == expected


def test_shape_inference_runs_on_the_blocks_device() -> None:
    blocks: list[nn.Module] = [nn.Flatten(), nn.Linear(6, 4).to(META), nn.BatchNorm1d(4).to(META)]
    assert output_shape("test", blocks, (2, 3)) == (4,)
    assert output_shape("test", [nn.Flatten()], (2, 3)) == (6,)  # no parameters: probed on the CPU
