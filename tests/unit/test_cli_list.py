"""``fedaug list``, ``fedaug partition`` and the help texts (issue 37: a new user's first ten minutes)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedaug import registry
from fedaug.cli import declared, listing
from fedaug.cli import options as option_reading
from fedaug.cli.main import build_parser, main
from fedaug.plugins import user_names
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


# --- the registrations' metadata -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_registered_name_has_metadata_read_the_same_from_its_source(kind: str) -> None:
    builtin = [name for name in registry.available(kind) if name not in user_names(kind)]  # not plugins'
    written = declared.declared(kind)
    assert sorted(written) == builtin
    for name in builtin:
        assert registry.meta(kind, name) is not None, f"{kind} {name!r} is registered without metadata"
        assert written[name] == registry.meta(kind, name), name


@pytest.mark.parametrize("kind", ["method", "dataset", "model", "partitioner"])
def test_every_builtin_name_is_found_by_the_fast_text_check_and_a_missing_one_is_not(kind: str) -> None:
    # a run's names are checked before torch by reading its kind's modules (fedaug.cli.common)
    builtin = [name for name in registry.available(kind) if name not in user_names(kind)]
    assert all(declared.quoted_in_package(kind, name) for name in builtin)
    assert not declared.quoted_in_package(kind, "no_such_" + kind)
    assert not declared.quoted_in_package(kind, builtin[0][:-1] + "_")  # a near miss is no match either


def test_model_parameter_counts_and_default_splits_are_the_built_models() -> None:
    for name in registry.available("model"):
        info = registry.meta("model", name)
        assert isinstance(info, registry.ModelMeta), name
        shape = info.input_shape or (1, 8, 8)
        model = registry.get("model", name)(num_classes=info.num_classes, input_shape=shape)
        assert model.default_split == info.default_split, name
        if info.params is not None:
            assert sum(p.numel() for p in model.parameters()) == info.params, name


@pytest.mark.parametrize("name", registry.available("method"))
def test_every_method_option_is_a_config_field_with_a_default_and_help(name: str) -> None:
    config_cls = registry.get("method", name).config_cls
    options = option_reading.method_options(name)
    assert [o.name for o in options] == [f.name for f in dataclasses.fields(config_cls)]
    defaults = config_cls()
    for option in options:
        assert option.help, f"{name}.{option.name} has no help (Attributes: section of its config)"
        assert "``" not in option.help and ":class:" not in option.help
        assert option.default == option_reading.yaml_value(getattr(defaults, option.name))


def test_docstring_section_reads_entries_continuations_and_stops_at_the_next_section() -> None:
    doc = """Summary.

    Attributes:
        alpha: first line
            continued ``here``.
        beta (int): see :class:`~fedaug.methods.fedzda.zsdg.ZSDGSettings`.

    Raises:
        gamma: not an attribute.
    """
    assert option_reading.docstring_section(doc, "Attributes") == {
        "alpha": "first line continued here.",
        "beta": "see ZSDGSettings.",
    }
    assert option_reading.docstring_section(doc, "Args") == {}
    assert option_reading.docstring_section(None, "Attributes") == {}


def test_config_options_prefer_field_metadata_and_the_nearest_class_docstring() -> None:
    @dataclasses.dataclass(frozen=True)
    class Base:
        """Base.

        Attributes:
            a: base help of a.
            b: base help of b.
        """

        a: int = 1
        b: float = 0.5

    @dataclasses.dataclass(frozen=True)
    class Child(Base):
        """Child.

        Attributes:
            a: child help of a.
        """

        c: tuple[int, ...] = dataclasses.field(default=(1, 2), metadata={"help": "from metadata"})
        d: bool | None = None

    options = {o.name: o for o in option_reading.config_options(Child)}
    assert options["a"].help == "child help of a." and options["b"].help == "base help of b."
    assert (options["c"].default, options["c"].help) == ("[1, 2]", "from metadata")
    assert (options["d"].default, options["d"].help) == ("null", "")


def test_registrations_are_read_from_literals_constants_and_their_sums() -> None:
    source = (
        'PAPER = "Someone et al., 2024"\n'
        'WITH = " + more"\n'
        '@register("method", "a", summary="A" + WITH, paper=PAPER)\n'
        "class A: ...\n"
        'B = registry.register("model", "b", summary=f"B{WITH}", input_shape=[1, 8], params=1_000,'
        " default_split=0)(object)\n"
        'other.register("model", "c")\n'  # not the registry's: ignored
        'register("partitioner", "d")(print)\n'
    )
    assert declared.registrations(source) == [
        ("method", "a", {"summary": "A + more", "paper": "Someone et al., 2024"}),
        ("model", "b", {"summary": "B + more", "input_shape": (1, 8), "params": 1000, "default_split": 0}),
        ("partitioner", "d", {}),
    ]
    with pytest.raises(declared.Unreadable, match="<source>:2: register"):
        declared.registrations('import x\nregister("method", "a", summary=x.TEXT, paper="p")\n')
    with pytest.raises(declared.Unreadable, match="literals"):
        declared.registrations("register(KIND, 'a')\n")


def test_wrong_or_missing_metadata_keywords_are_refused_naming_the_valid_ones() -> None:
    with pytest.raises(registry.RegistryError, match="unknown sumary; a method takes summary, paper"):
        registry.register("method", "x", sumary="s", paper="p")
    with pytest.raises(registry.RegistryError, match="missing paper"):
        registry.register("method", "x", summary="s")


def test_a_plugin_lists_its_metadata_or_else_its_docstring(tmp_path: Path) -> None:
    from fedaug import plugins
    from tests.plugin_fixtures import isolated_plugins

    plugin = tmp_path / "meta_plugin.py"
    plugin.write_text(
        "import fedaug\n"
        "from fedaug.methods.fedavg import FedAvg\n\n"
        '@fedaug.register_model("p_net", summary="a tiny net", input_shape=(4,), params=5, default_split=0)\n'
        "def p_net(*, num_classes, input_shape):\n"
        '    """Not this line."""\n\n'
        '@fedaug.register_method("p_avg")\n'
        "class PAvg(FedAvg):\n"
        '    """FedAvg again.\n\n    More text.\n    """\n'
        '    name = "p_avg"\n'
    )
    with isolated_plugins():
        plugins.import_plugin(str(plugin))
        models = {line.split()[0]: line for line in listing.summary_lines("model")}
        assert re.fullmatch(r"p_net +\[4\] +5 +0 +a tiny net", models["p_net"])
        assert (
            listing.description("method", "p_avg")
            == f"FedAvg again ({plugins.origin(registry.get('method', 'p_avg'))})"
        )
        assert "p_avg" in listing.names("method") and "p_net" in listing.names("model")
    assert "p_avg" not in listing.names("method") and registry.meta("model", "mlp") is not None


# --- fedaug list ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", registry.KINDS)
def test_plural_and_singular_print_one_line_per_name(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    singular = _out(capsys, ["list", kind])
    assert _out(capsys, ["list", f"{kind}s"]) == singular
    lines = singular.splitlines()
    if kind in ("dataset", "model"):  # columns under a header
        assert lines.pop(0).split()[0] == "name"
    assert [line.split()[0] for line in lines] == registry.available(kind)
    assert all(len(line.split()) > 1 for line in lines)


def test_list_method_gives_a_description_and_the_paper(capsys: pytest.CaptureFixture[str]) -> None:
    lines = {line.split()[0]: line for line in _out(capsys, ["list", "method"]).splitlines()}
    assert re.fullmatch(
        r"fedntd +FedAvg \+ not-true-class distillation \(Lee et al\., NeurIPS 2022\)", lines["fedntd"]
    )
    for name, line in lines.items():
        assert re.search(r"\([^()]*(19|20)\d\d[^()]*\)$", line), f"{name}: no paper with a year: {line}"


def test_list_datasets_models_partitioners_show_their_facts(capsys: pytest.CaptureFixture[str]) -> None:
    datasets = _out(capsys, ["list", "datasets"]).splitlines()
    assert datasets[0].split() == ["name", "shape", "train", "/", "test", "classes", "source", "license"]
    uci = next(line for line in datasets if line.startswith("uci_har "))
    assert "[1,128,3]" in uci and "7352 / 2947" in uci and "Anguita" in uci and "CC BY 4.0" in uci
    models = _out(capsys, ["list", "models"]).splitlines()
    assert models[0].split()[:3] == ["name", "input", "params"] and "default split" in models[0]
    assert re.match(r"harnet +\[1,128,3\] +691,974 +1 ", next(m for m in models if m.startswith("harnet ")))
    partitioners = _out(capsys, ["list", "partitioners"])
    assert "alpha (required), min_size=null, balance=true, max_tries=1000" in partitioners
    assert "shards_per_client=2" in partitioners


def test_list_without_kind_names_everything_and_says_how_to_see_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _out(capsys, ["list"])
    for kind in registry.KINDS:
        assert f"{kind}s: {', '.join(registry.available(kind))}" in out
    assert "fedaug list KIND NAME" in out


def test_list_method_name_prints_its_options_defaults_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(capsys, ["list", "methods", "fedntd"])
    assert out.startswith("fedntd: FedAvg + not-true-class distillation (Lee et al., NeurIPS 2022)\n")
    assert "--set method.OPTION=VALUE" in out
    assert "  ntd_beta (float) = 1.0\n      weight beta of the not-true distillation term" in out
    assert "  ntd_tau (float) = 1.0\n" in out
    augmix = _out(capsys, ["list", "method", "fedprox_augmix"])  # options of the base and of the mixin
    assert "proximal_mu (float) = 0.01" in augmix and "loss_scaling (bool) = true" in augmix
    assert "no options of its own" in _out(capsys, ["list", "method", "fedavg"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["list", "dataset", "uci_har"],
            ["use: --set data=uci_har", "channels (int) = 3", "9 (all inertial"],
        ),
        (["list", "model", "mlp"], ["hidden_sizes (tuple[int, ...]) = [256]"]),
        (["list", "partitioner", "dirichlet"], ["alpha (float) required", "Dirichlet concentration"]),
        (["list", "attack", "invert"], ["Geiping et al., NeurIPS 2020", "fedaug attack invert --help"]),
    ],
)
def test_list_name_of_other_kinds(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: list[str]
) -> None:
    out = _out(capsys, argv)
    for text in expected:
        assert text in out


@pytest.mark.parametrize("name", registry.available("method"))
def test_list_every_method_name_works(capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert _out(capsys, ["list", "method", name]).startswith(f"{name}: ")


def test_unknown_name_is_one_line_naming_the_valid_ones_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "method", "fedntdd"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    start = "fedaug: error: unknown method 'fedntdd'; valid choices: ccvr, centralized, fedadagrad"
    assert line.startswith(start)
    assert "fedntd" in line and "fedaugmix" in line


def test_unknown_kind_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["list", "metods"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'metods'" in capsys.readouterr().err


# --- help texts -------------------------------------------------------------------------------------------


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _parsers(child, (*path, name))
    return found


def test_top_level_help_says_what_fedaug_is_and_shows_two_examples() -> None:
    parser = build_parser()
    assert parser.description is not None and "\n" not in parser.description
    assert "federated learning" in parser.description
    assert parser.epilog is not None
    examples = [line for line in parser.epilog.splitlines() if line.startswith("  fedaug ")]
    assert len(examples) == 2


def test_every_command_has_an_example_and_no_rest_markup() -> None:
    for path, parser in _parsers(build_parser(), ("fedaug",)):
        text = parser.format_help()
        assert "``" not in text and not re.search(r":(class|func|mod):`", text), path
        if len(path) > 1:
            assert isinstance(parser.formatter_class, type)
            assert issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter), path
            assert parser.epilog and f"\n  {' '.join(path)}" in f"\n{parser.epilog}", path


# --- fedaug partition -------------------------------------------------------------------------------------


def _partition_without_matplotlib(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # `import matplotlib` now raises ImportError
        "from fedaug.cli.main import main\n"
        f"sys.exit(main(['partition', {SMOKE!r}, *{list(args)!r}]))\n"
    )
    env = {**os.environ, "FEDAUG_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_partition_prints_the_table_without_matplotlib(tmp_path: Path) -> None:
    result = _partition_without_matplotlib(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "clients: 6, samples: 600" in result.stdout
    assert "heat-map" not in result.stdout and "error" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # no heat-map written


def test_partition_plot_without_matplotlib_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = _partition_without_matplotlib(tmp_path, "--plot")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("fedaug: error: --plot needs matplotlib")
    assert result.stdout == ""  # refused before any data is loaded


def test_partition_plot_writes_the_heat_map_only_when_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))
    assert "heat-map" not in _out(capsys, ["partition", SMOKE])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    assert "heat-map: synthetic-dirichlet0.5_2-K6.png" in _out(capsys, ["partition", SMOKE, "--plot"])
    assert (tmp_path / "synthetic-dirichlet0.5_2-K6.png").stat().st_size > 0
    assert "heat-map: out/h.pdf" in _out(capsys, ["partition", SMOKE, "--plot", "out/h.pdf"])
    assert (tmp_path / "out" / "h.pdf").is_file() and (tmp_path / "out" / "h.png").is_file()


def test_partition_plot_refuses_a_config_file_as_its_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["partition", "--plot", SMOKE]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("fedaug: error: --plot takes a .png or .pdf path") and "before --plot" in line


def test_version_names_fedaug_torch_and_python(capsys: pytest.CaptureFixture[str]) -> None:
    import platform

    import torch

    import fedaug

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    expected = f"fedaug {fedaug.__version__} (torch {torch.__version__}, Python {platform.python_version()})"
    assert capsys.readouterr().out.strip() == expected
