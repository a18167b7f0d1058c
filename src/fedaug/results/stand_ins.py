"""Datasets that stand in for a paper's, and the label every table, plot and report header gives them.

Only a JPEG quality-75 re-encoding of CIFAR-10 exists offline (``cifar10`` with ``data.variant: jpeg_lossy``).
Its runs are numbers of their own: a setting on it is labelled "CIFAR-10 (JPEG q75 copy)" instead of
``cifar10`` (:func:`dataset_label`), so that a column beside a paper's CIFAR-10 numbers says what ran, and a
report on it says so in its header (:func:`stand_in_notes`). How far the copy moves an accuracy against the
official pickles has not been measured.

A model stands in for a paper's when the run's config says so (``model.stand_in_for``, set by a preset such
as ``configs/experiments/flea_cifar10_standin.yaml``): its label is ``bn_cnn_cifar (stand-in model for
MobileNetV2)`` (:func:`model_label`), in the setting labels of tables and plots, and the report header says
that these are not the paper's model's numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StandIn:
    """A dataset variant that is not the papers' data: its label and what a report says about it."""

    label: str
    note: str


STAND_INS: dict[tuple[str, str], StandIn] = {
    ("cifar10", "jpeg_lossy"): StandIn(
        label="CIFAR-10 (JPEG q75 copy)",
        note="CIFAR-10 (JPEG q75 copy): a lossy JPEG (quality 75) re-encoding of CIFAR-10, not the data of "
        "the papers' CIFAR-10 numbers; how far it moves accuracy against the official pickles was not "
        "measured",
    ),
}
"""(``data.name``, ``data.variant``) -> its :class:`StandIn`."""


def stand_in(config: Mapping[str, Any]) -> StandIn | None:
    """The :class:`StandIn` of a flat config's dataset, or None for the real data."""
    return STAND_INS.get((str(config.get("data.name")), str(config.get("data.variant"))))


def dataset_label(config: Mapping[str, Any]) -> str:
    """``data.name``, or the stand-in's label (``CIFAR-10 (JPEG q75 copy)``)."""
    found = stand_in(config)
    return str(config.get("data.name")) if found is None else found.label


def model_label(config: Mapping[str, Any]) -> str:
    """``model.name``, or ``bn_cnn_cifar (stand-in model for MobileNetV2)`` where ``model.stand_in_for`` is
    set."""
    name, paper_model = config.get("model.name"), config.get("model.stand_in_for")
    return str(name) if paper_model is None else f"{name} ({STAND_IN_MODEL} for {paper_model})"


STAND_IN_MODEL = "stand-in model"
"""What a label calls a model that stands in for a paper's."""


def labels_stand_in(column: str) -> bool:
    """Whether a setting label (:func:`fedaug.results.store.setting_label`) is of a stand-in dataset."""
    return any(column.startswith(s.label) for s in STAND_INS.values())


def stand_in_notes(configs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The notes of the stand-in datasets among ``configs`` (each once, in :data:`STAND_INS` order)."""
    found = {stand_in(config) for config in configs}
    return [s.note for s in STAND_INS.values() if s in found]


def stand_in_model_notes(configs: Iterable[Mapping[str, Any]]) -> list[str]:
    """One note per stand-in model among ``configs`` (first seen first): which paper model it replaces."""
    found = dict.fromkeys(
        (str(c.get("model.name")), str(c["model.stand_in_for"]))
        for c in configs
        if c.get("model.stand_in_for") is not None
    )
    return [
        f"{name} is a {STAND_IN_MODEL} for the paper's {paper_model}: these are not {paper_model}'s numbers"
        for name, paper_model in found
    ]
