"""Method presets: ``flea_official`` and ``flea_eq6`` are FLea with other defaults, and answer wherever a
method class does."""

from __future__ import annotations

import dataclasses

import pytest

from fedaug import registry
from fedaug.api import MethodConfig
from fedaug.cli import listing
from fedaug.config.load import build_dataclass
from fedaug.methods.flea.method import (
    FLea,
    FLeaConfig,
    FLeaEq6,
    FLeaEq6Config,
    FLeaOfficial,
    FLeaOfficialConfig,
)
from fedaug.methods.parts.preset import MethodPreset

# flea's default shares decor_form, decor_schedule and local_ce_weight with the authors' code
OFFICIAL = {
    "share_sampling": ("fresh", "fixed"),
    "distill_on": ("mixed", "buffer"),
    "distill_direction": ("local_global", "global_local"),
    "warmup": ("paper", "official"),
}
EQ6 = {
    "decor_form": ("dcor", "dcor_squared"),
    "decor_schedule": ("official", "constant"),
    "local_ce_weight": (1.0, 0.0),
}


def test_flea_official_is_a_registered_preset_of_flea() -> None:
    # Prepare
    preset = registry.get("method", "flea_official")
    # Execute
    method = preset()
    # Assert: a FLea (no subclass) with the preset's defaults, named as the user chose it
    assert preset is FLeaOfficial and isinstance(preset, MethodPreset)
    assert (preset.name, preset.base_name, preset.config_cls) == ("flea_official", "flea", FLeaOfficialConfig)
    assert type(method) is FLea and method.name == "flea_official" and FLea.name == "flea"
    assert method.config == FLeaOfficialConfig() and FLea().name == "flea"
    assert preset.changed_defaults() == OFFICIAL


def test_flea_eq6_is_the_papers_eq6_as_printed() -> None:
    # Prepare
    preset = registry.get("method", "flea_eq6")
    # Execute
    method = preset()
    # Assert: the KDD paper's squared dCor at a constant weight and no local CE; everything else is flea's
    assert preset is FLeaEq6 and type(method) is FLea and method.name == "flea_eq6"
    assert method.config == FLeaEq6Config()
    assert (method.config.decor_form, method.config.decor_schedule) == ("dcor_squared", "constant")
    assert method.config.local_ce_weight == 0.0
    assert preset.changed_defaults() == EQ6


def test_user_options_go_on_top_of_the_preset_defaults() -> None:
    config = build_dataclass(FLeaOfficial.config_cls, {"decor_form": "trace"}, path="method")
    method = FLeaOfficial(config)
    assert method.config.decor_form == "trace" and method.config.warmup == "official"
    assert method.name == "flea_official"


def test_preset_config_has_the_methods_fields_in_order() -> None:
    # config.yaml and env.json of a flea_official run hold FLea's keys in FLea's order
    official, paper = dataclasses.asdict(FLeaOfficialConfig()), dataclasses.asdict(FLeaConfig())
    assert list(official) == list(paper)
    assert {k for k in paper if paper[k] != official[k]} == set(OFFICIAL)


def test_preset_refuses_a_config_that_is_more_than_other_defaults() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithNewOption(FLeaConfig):
        new_option: int = 1

    @dataclasses.dataclass(frozen=True)
    class Unrelated(MethodConfig):
        decor_form: str = "dcor"

    for config_cls in (WithNewOption, Unrelated):
        with pytest.raises(TypeError, match="change only its defaults"):
            MethodPreset("broken", FLea, config_cls)


def test_list_says_it_is_a_preset_and_lists_the_changed_defaults() -> None:
    lines = listing.detail_lines("method", "flea_official")
    assert lines[0].startswith("flea_official: ")
    assert lines[1] == "a preset of flea: flea with these defaults changed"
    assert lines[2:6] == [
        "  share_sampling = fixed (flea: fresh)",
        "  distill_on = buffer (flea: mixed)",
        "  distill_direction = global_local (flea: local_global)",
        "  warmup = official (flea: paper)",
    ]
    assert lines[6].startswith("use: --set method=flea_official")
    assert listing.preset_lines("flea") == []
