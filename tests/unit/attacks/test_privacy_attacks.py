"""Reconstruction and context attacks: decoder shapes, the marker, planted easy cases, the CLI end to end."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from fedaug.attacks.context import (
    ClassifierSettings,
    Marker,
    accuracy,
    add_marker,
    make_samples,
    train_classifier,
)
from fedaug.attacks.decoders import DECODERS, build_decoder
from fedaug.attacks.reconstruct import DecoderSettings, attack_direct, attack_features, groups
from fedaug.attacks.target import Target, from_pixels, parse_spec, to_pixels
from fedaug.cli.main import main
from fedaug.data.datasets import Dataset
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.models import build_model
from fedaug.runtime.seeding import torch_generator


@pytest.mark.parametrize(
    ("model", "shape"),
    [("lenet5", (1, 28, 28)), ("bn_cnn_mnist", (1, 28, 28)), ("harnet", (1, 128, 3)), ("mlp", (3, 8, 8))],
)
def test_every_decoder_maps_every_split_layer_back_to_the_input_shape(
    model: str, shape: tuple[int, ...]
) -> None:
    net = build_model(model, num_classes=10, input_shape=shape)
    for layer in net.split_layers:
        features = net.activation_shape(shape, layer)
        for name in DECODERS:
            decoder = build_decoder(name, features, shape).eval()
            assert tuple(decoder(torch.zeros(2, *features)).shape) == (2, *shape), (model, layer, name)


def test_paper_decoder_layers_and_the_official_one_is_affine() -> None:
    # ICLR draft Table 10: [16,32,32] -> conv1x1 [32,32,32] -> convT s2 [32,64,64] -> conv s2 [32,32,32]
    # -> conv1x1 [3,32,32]
    decoder = build_decoder("conv4", (16, 32, 32), (3, 32, 32))
    sizes, x = [], torch.zeros(1, 16, 32, 32)
    for module in decoder:
        x = module(x)
        if isinstance(module, nn.Conv2d | nn.ConvTranspose2d):
            sizes.append(tuple(x.shape[1:]))
    assert sizes == [(32, 32, 32), (32, 64, 64), (32, 32, 32), (3, 32, 32)]
    linear = build_decoder("linear", (6, 14, 14), (1, 28, 28)).eval()
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(1, 6, 14, 14, generator=gen), torch.randn(1, 6, 14, 14, generator=gen)
    zero = linear(torch.zeros_like(a))
    torch.testing.assert_close(
        linear(a + b) - zero, (linear(a) - zero) + (linear(b) - zero), atol=1e-5, rtol=1e-4
    )
    with pytest.raises(ConfigError, match="valid choices: linear, conv4, deep"):
        build_decoder("unet", (4,), (1, 8, 8))
    with pytest.raises(IncompatibleModelError, match=r"\[C, H, W\]"):
        build_decoder("deep", (4,), (8,))


def test_marker_is_exactly_the_square_and_nothing_else() -> None:
    pixels = torch.rand(2, 3, 8, 9, generator=torch.Generator().manual_seed(1))
    marked = add_marker(pixels, size=2, top=1, left=3)
    expected = pixels.clone()
    expected[:, 0, 1:3, 3:5] = 1.0  # red
    expected[:, 1:, 1:3, 3:5] = 0.0
    assert torch.equal(marked, expected)
    assert not torch.equal(marked, pixels)  # a copy: the input is untouched
    grey = add_marker(torch.zeros(1, 1, 6, 6), size=5, top=1, left=1)
    assert grey.sum().item() == 25.0 and grey[0, 0, 0].sum().item() == 0.0 and grey[0, 0, 1:, 1:].min() == 1.0
    assert torch.equal(
        add_marker(torch.zeros(1, 1, 4, 4), size=1, top=0, left=0, colour=(0.5,))[0, 0, 0, 0],
        torch.tensor(0.5),
    )
    with pytest.raises(ConfigError, match="does not fit in 6x6"):
        add_marker(torch.zeros(1, 1, 6, 6), size=5, top=2, left=0)
    with pytest.raises(ConfigError, match="needs 3 values"):
        add_marker(torch.zeros(1, 3, 6, 6), colour=(1.0,), size=2)


def _dataset(num: int = 400, side: int = 12) -> Dataset:
    """Smooth random images in [0, 1] (normalised with mean 0.5 / std 0.25) with 4 labels."""
    gen = torch.Generator().manual_seed(0)
    low = torch.rand(2 * num, 1, side // 4, side // 4, generator=gen)
    pixels = nn.functional.interpolate(low, size=(side, side), mode="bilinear", align_corners=False)
    x = (pixels - 0.5) / 0.25
    y = torch.arange(2 * num) % 4
    return Dataset(
        "toy",
        x[:num],
        y[:num],
        x[num:],
        y[num:],
        4,
        list("abcd"),
        (1, side, side),
        "test",
        mean=(0.5,),
        std=(0.25,),
    )


class Constant(nn.Module):
    """An encoder that forgets its input: four zeros per sample."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], 4)


def _target(
    dataset: Dataset, shared: str = "features", encoder: nn.Module | None = None, group: int = 1
) -> Target:
    class Encoder(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def encode(self, x: torch.Tensor, layer: int) -> torch.Tensor:
            del layer
            return self.inner(x)

    model = Encoder(encoder) if encoder is not None else None
    return Target("t", Path("."), 1, "flea", shared, dataset, model, 0 if model else None, group, {})  # type: ignore[arg-type]


def test_pixels_round_trip() -> None:
    dataset = _dataset(8)
    torch.testing.assert_close(from_pixels(dataset, to_pixels(dataset, dataset.x_test)), dataset.x_test)


def test_reconstruction_succeeds_on_an_identity_encoder_and_fails_on_a_constant_one() -> None:
    dataset = _dataset(200)
    x_att, x_eval = dataset.x_train, dataset.x_test[:100]
    data = (x_att, x_eval, to_pixels(dataset, x_att))
    settings = DecoderSettings(epochs=8, batch_size=32, lr=3e-3, width=8)
    rows, examples, stats = attack_features(_target(dataset), data, ["linear"], settings, seed=0)
    assert rows[0].mse < 0.05 * rows[0].baseline_mse  # the attack works: near-zero error through the identity
    assert examples["linear"].shape == (100, 1, 12, 12)
    # scored clamped to the pixels' [0, 1], as FedMix's estimates are; the raw outputs' MSE is kept
    assert rows[0].estimate == "clamped" and rows[0].plain_mse is not None
    assert rows[0].mse <= rows[0].plain_mse
    assert float(examples["linear"].min()) >= 0.0 and float(examples["linear"].max()) <= 1.0
    assert stats["eval_dcor"] == pytest.approx(1.0)
    rows, _, _ = attack_features(_target(dataset, encoder=Constant()), data, ["linear"], settings, seed=0)
    assert rows[0].mse > 0.95 * rows[0].baseline_mse  # nothing to recover from a constant activation


def test_fedmix_average_error_is_the_within_group_variance_and_feddata_is_zero() -> None:
    dataset = _dataset(40)
    pix = to_pixels(dataset, dataset.x_test)
    rows, examples = attack_direct(
        _target(dataset, "averages", group=10), dataset.x_test, dataset.y_test, pix, 0
    )
    assert [r.attacker for r in rows] == ["average (random groups of 10)", "average (one class groups of 10)"]
    members = groups(dataset.y_test, 10, torch.Generator().manual_seed(0), same_class=True)
    assert all(len(set(dataset.y_test[g].tolist())) == 1 for g in members)  # one class per group
    assert len(set(members.flatten().tolist())) == members.numel()  # disjoint
    random = groups(dataset.y_test, 10, torch_generator(0, "fedmix-groups", 0), same_class=False)
    assert random.shape == (4, 10)
    within = pix[random] - pix[random].mean(dim=1, keepdim=True)  # the same groups as attack_direct's
    assert rows[0].mse == pytest.approx(float((within**2).mean()), rel=1e-6)
    assert 0 < rows[0].mse < rows[0].baseline_mse
    assert examples["average (random groups of 10)"].shape == (16, 1, 12, 12)
    raw, _ = attack_direct(_target(dataset, "raw"), dataset.x_test, dataset.y_test, pix, 0)
    assert raw[0].mse == 0.0


def test_fedmix_rows_without_dp_are_the_plain_averages_exactly_as_before() -> None:
    # the rows and examples attack_direct wrote before the attacker's estimates existed (commit c0e5fc2)
    dataset = _dataset(40)
    pix = to_pixels(dataset, dataset.x_test)
    attacker = (dataset.x_train, dataset.y_train)
    rows, examples = attack_direct(
        _target(dataset, "averages", group=10), dataset.x_test, dataset.y_test, pix, 3, attacker=attacker
    )
    assert [(r.attacker, r.mse, r.baseline_mse) for r in rows] == [
        ("average (random groups of 10)", 0.04775019735097885, 0.052057914435863495),
        ("average (one class groups of 10)", 0.047494783997535706, 0.052057914435863495),
    ]
    assert all(r.plain_mse is None and r.estimate is None and r.estimates is None for r in rows)
    assert float(examples["average (random groups of 10)"].sum()) == 1161.36376953125


def test_a_rectangle_marker_is_one_sensor_channel_stuck_for_a_while() -> None:
    windows = torch.zeros(2, 1, 128, 3)
    marked = add_marker(windows, size=16, width=1, top=56, left=2, colour=(0.5,))
    assert (marked[:, 0, 56:72, 2] == 0.5).all() and int((marked != 0).sum()) == 2 * 16
    with pytest.raises(ConfigError, match=r"a 16x2 marker at \(0, 2\) does not fit in 128x3 inputs"):
        add_marker(windows, size=16, width=2, top=0, left=2, colour=(0.5,))


def test_context_samples_are_balanced_and_fedmix_averages_keep_the_exact_marker() -> None:
    dataset = _dataset(100)
    marker = Marker(size=3, top=0, left=0)
    x, y = make_samples(
        _target(dataset, "averages", group=10),
        dataset.x_train,
        50,
        marker,
        torch.Generator().manual_seed(0),
        10,
    )
    assert int(y.sum()) == 25 and x.shape == (50, 144)
    square = to_pixels(dataset, x.view(50, 1, 12, 12))[:, 0, :3, :3]
    assert torch.allclose(square[y == 1], torch.ones(25, 3, 3), atol=1e-6)  # the average of marked images
    assert not torch.allclose(square[y == 0], torch.ones(25, 3, 3), atol=1e-3)


def test_marker_classifier_learns_an_obvious_signal_and_not_a_missing_one() -> None:
    dataset = _dataset(300)
    marker, settings = Marker(size=3, top=0, left=0), ClassifierSettings(epochs=5, min_steps=150)
    raw = _target(dataset, "raw")
    x, y = make_samples(raw, dataset.x_train, 200, marker, torch.Generator().manual_seed(0), 1)
    ex, ey = make_samples(raw, dataset.x_test, 200, marker, torch.Generator().manual_seed(1), 1)
    assert accuracy(train_classifier(x, y, settings, seed=0), ex, ey) > 0.97
    blind = _target(dataset, encoder=Constant())
    x, y = make_samples(blind, dataset.x_train, 200, marker, torch.Generator().manual_seed(0), 1)
    ex, ey = make_samples(blind, dataset.x_test, 200, marker, torch.Generator().manual_seed(1), 1)
    assert accuracy(train_classifier(x, y, settings, seed=0), ex, ey) == 0.5  # balanced, nothing to see


def test_parse_spec() -> None:
    assert parse_spec("runs/a/seed0") == (None, Path("runs/a/seed0"), None)
    assert parse_spec("early=runs/a/seed0@5") == ("early", Path("runs/a/seed0"), 5)
    # a sweep's run dir holds "key=value" segments: not a label
    sweep_dir = "runs/t/method.q=0.01/mnist-shards2-K100/qffl/seed0"
    assert parse_spec(f"{sweep_dir}@79") == (None, Path(sweep_dir), 79)
    assert parse_spec(f"q small={sweep_dir}") == ("q small", Path(sweep_dir), None)
    with pytest.raises(ConfigError, match="must be a number"):
        parse_spec("runs/a@last")


def test_reconstruct_cli_end_to_end(
    tiny_runs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flea = tiny_runs["flea"]
    argv = [
        "attack",
        "reconstruct",
        f"early={flea}@1",
        str(flea),
        str(tiny_runs["fedmix"]),
        str(tiny_runs["feddata"]),
    ]
    assert main([*argv, "--out", str(tmp_path), "--epochs", "1", "--decoders", "linear,deep", "--plots"]) == 0
    report = json.loads((tmp_path / "reconstruct.json").read_text())
    rows = {(r["target"], r["attacker"]): r for r in report["rows"]}
    assert {t for t, _ in rows} == {"early", "flea (smoke) r2", "fedmix (smoke) r1", "feddata (smoke) r1"}
    assert rows[("early", "deep")]["round"] == 1 and rows[("flea (smoke) r2", "linear")]["round"] == 2
    assert rows[("feddata (smoke) r1", "shared inputs")]["mse"] == 0.0
    for name in ("reconstruct.md", "reconstruct_examples.png", "reconstruct_training.png"):
        assert (tmp_path / name).is_file()
    assert any(p.name.startswith("flea_privacy_") for p in tmp_path.glob("*.png"))
    assert "![reconstruct_examples](reconstruct_examples.png)" in (tmp_path / "reconstruct.md").read_text()
    assert "eval MSE" in capsys.readouterr().out
    loaded: list[str] = []
    monkeypatch.setattr("fedaug.attacks.target.load_dataset", lambda name, **_: loaded.append(name))
    assert main(["attack", "reconstruct", f"{flea}@7", "--out", str(tmp_path)]) == 2
    assert "kept rounds: 1" in capsys.readouterr().err
    assert loaded == []  # refused before the dataset loads


def test_context_cli_end_to_end(tiny_runs: dict[str, Path], tmp_path: Path) -> None:
    argv = ["attack", "context", str(tiny_runs["flea"]), str(tiny_runs["fedmix"]), "--out", str(tmp_path)]
    options = [
        "--sizes",
        "20,40",
        "--repeats",
        "2",
        "--eval-size",
        "60",
        "--min-steps",
        "20",
        "--marker-size",
        "3",
    ]
    assert main([*argv, *options, "--attacker-data", "test"]) == 0
    report = json.loads((tmp_path / "context.json").read_text())
    assert set(report["accuracy"]) == {"flea (smoke) r2", "fedmix (smoke) r1"}
    assert all(
        len(accs) == 2 and all(0 <= a <= 1 for a in accs)
        for c in report["accuracy"].values()
        for accs in c.values()
    )
    assert (tmp_path / "context_accuracy.png").is_file() and (tmp_path / "context_examples.png").is_file()
    assert "![context_accuracy](context_accuracy.png)" in (tmp_path / "context.md").read_text()
    assert main([*argv, "--marker-size", "13"]) == 2  # does not fit in 12x12


def _copy_run(source: Path, dest: Path, method: str | None = None, *, keep_ckpt: bool = True) -> Path:
    """A copy of a run dir, optionally as another method's (its options dropped) or without checkpoints."""
    shutil.copytree(source, dest)
    if method is not None:
        config = yaml.safe_load((dest / "config.yaml").read_text())
        config["method"] = {"name": method}
        (dest / "config.yaml").write_text(yaml.safe_dump(config))
    if not keep_ckpt:
        shutil.rmtree(dest / "ckpt")
    return dest


def test_bad_targets_are_refused_in_one_line_naming_the_run_dir_before_anything_trains(
    tiny_runs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flea = tiny_runs["flea"]
    fedavg = _copy_run(tiny_runs["feddata"], tmp_path / "fedavg" / "seed0", "fedavg")
    bare = _copy_run(flea, tmp_path / "bare" / "seed0", keep_ckpt=False)
    shared = "feddata, fedmix, flea, flea_eq6, flea_official"
    cases = [
        (
            [str(fedavg)],
            [],
            f"{fedavg}: fedavg shares only model weights (methods that share what these "
            f"attacks read: {shared}); pass --layer N to attack its encoder anyway",
        ),
        ([str(bare)], [], f"{bare} has no checkpoint for round latest (kept rounds: none;"),
        ([f"{flea}@2"], [], f"{flea} has no checkpoint for round 2 (kept rounds: 1;"),
        ([str(tmp_path / "nowhere")], [], f"{tmp_path / 'nowhere'} is not a run directory (no config.yaml)"),
        (
            [str(flea)],
            ["--layer", "1"],
            f"{flea}: flea shared the activations of split layer 0, not --layer 1;",
        ),
        ([str(fedavg)], ["--layer", "9"], f"{fedavg}: --layer 9 does not exist in its LeNet5 (valid: -1..3)"),
    ]
    trained: list[str] = []
    monkeypatch.setattr("fedaug.attacks.reconstruct.train_decoder", lambda *a, **k: trained.append("r"))
    monkeypatch.setattr("fedaug.attacks.context.train_classifier", lambda *a, **k: trained.append("c"))
    for targets, options, message in cases:
        for attack in ("reconstruct", "context"):
            out = tmp_path / "out"
            assert (
                main(["attack", attack, str(tiny_runs["feddata"]), *targets, "--out", str(out), *options])
                == 2
            )
            err = capsys.readouterr().err.strip()
            assert message in err and "\n" not in err, (attack, err)
            assert not out.exists() and trained == []


@pytest.mark.parametrize(
    ("attack", "step", "options", "result"),
    [
        ("context", "accuracy_curve", ["--sizes", "20,40", "--repeats", "1", "--eval-size", "40",
                                       "--min-steps", "10", "--marker-size", "3", "--attacker-data", "test"],
         "accuracy"),
        ("reconstruct", "attack_features", ["--decoders", "linear", "--epochs", "1", "--eval-size", "40"],
         "rows"),
    ],
)  # fmt: skip
def test_an_interrupted_attack_resumes_from_its_finished_targets(
    tiny_runs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    attack: str,
    step: str,
    options: list[str],
    result: str,
) -> None:
    flea = tiny_runs["flea"]
    argv = ["attack", attack, f"early={flea}@1", f"late={flea}", *options]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads((tmp_path / "whole" / f"{attack}.json").read_text())
    assert not (tmp_path / "whole" / ".partial").exists()
    module = importlib.import_module(f"fedaug.attacks.{attack}")
    real, calls = getattr(module, step), []

    def interrupted(target: Target, *args: object, **kwargs: object) -> object:
        calls.append(target.label)
        if target.label == "late" and len(calls) == 2:
            raise KeyboardInterrupt  # the second target is cut off
        return real(target, *args, **kwargs)

    monkeypatch.setattr(module, step, interrupted)
    out = tmp_path / "cut"
    assert main([*argv, "--out", str(out)]) != 0
    assert len(list((out / ".partial").glob("*.pt"))) == 1 and not (out / f"{attack}.json").exists()
    assert main([*argv, "--out", str(out), "--threads", "2"]) == 0  # --threads does not change results
    assert calls == ["early", "late", "late"]  # the finished target was read back, not attacked again
    assert json.loads((out / f"{attack}.json").read_text())[result] == whole[result]
    assert not (out / ".partial").exists()
    assert main([*argv, "--out", str(out), "--seed", "1"]) == 0  # another setting: nothing reused
    assert calls[3:] == ["early", "late"]
