"""The real profiles shipped with the package: the Pollux (OSDI 2021) artifact's six models.

Data: Apache-2.0, Copyright 2020 Petuum, Inc.; see ``perfmodel/data/pollux/LICENSE`` and NOTICE.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

POLLUX_MODELS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def pollux_traces_dir() -> Path:
    """Folder holding ``<model>/placements.csv``, ``scalability.csv`` and ``validation-<B>.csv``."""
    return Path(str(resources.files("perfmodel") / "data" / "pollux" / "traces"))


def pollux_model_dir(model: str) -> Path:
    """Folder of one shipped model's traces; raises :class:`~perfmodel.errors.InputError`."""
    from perfmodel.errors import InputError

    if model not in POLLUX_MODELS:
        raise InputError(
            f"unknown model '{model}': expected one of {', '.join(POLLUX_MODELS)}"
        )
    return pollux_traces_dir() / model
