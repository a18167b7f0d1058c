"""Each fact is logged once per command (issue 57): the dataset and partition that ``fedaug run`` loads for
every method it checks and runs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.runtime import log_once


def test_info_once_logs_a_text_at_info_once_then_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("fedaug.test_log_once")
    log_once.forget()
    with caplog.at_level(logging.DEBUG, logger="fedaug.test_log_once"):
        log_once.info_once(logger, "loaded %s", "a")
        log_once.info_once(logger, "loaded %s", "a")
        log_once.info_once(logger, "loaded %s", "b")
        log_once.forget()
        log_once.info_once(logger, "loaded %s", "a")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "loaded a"),
        ("DEBUG", "loaded a"),
        ("INFO", "loaded b"),
        ("INFO", "loaded a"),
    ]


def test_a_run_of_two_methods_logs_its_dataset_and_partition_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "smoke", "--method", "fedavg,fedprox", "--out-dir", str(tmp_path)]
    argv += ["--set", "train.rounds=1", "--set", "engine.progress=false", "--fresh"]
    with caplog.at_level(logging.INFO, logger="fedaug"):
        assert main(argv) == 0
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert sum(m.startswith("loaded synthetic") for m in infos) == 1, infos
    assert sum(m.startswith("loaded partition from") for m in infos) == 1, infos  # drawn once, then read
    capsys.readouterr()
