"""The real profiles shipped with the package: the Pollux (OSDI 2021) artifact's six models.

Data: Apache-2.0, Copyright 2020 Petuum, Inc.; see ``perfmodel/data/pollux/LICENSE`` and NOTICE.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfmodel.profiles import GradientTrace, StepTimeProfile

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


def resolve_profile(source: str) -> StepTimeProfile:
    """A step-time profile from a CSV file, a folder of them, or a shipped model's name; raises
    :class:`~perfmodel.errors.InputError` naming ``source`` for anything else."""
    from perfmodel.errors import InputError
    from perfmodel.profiles import read_step_time_profile

    path = Path(source)
    if path.exists():
        return read_step_time_profile(path)
    if source in POLLUX_MODELS:
        return read_step_time_profile(pollux_model_dir(source), source)
    raise InputError(f"no such file, folder or shipped model: expected a profile CSV, a folder "
                     f"or one of {', '.join(POLLUX_MODELS)}", source)


def resolve_gradients(source: str) -> dict[int, GradientTrace]:
    """Gradient traces from a validation CSV, a folder of them, or a shipped model's name, by
    batch size; raises :class:`~perfmodel.errors.InputError` naming ``source`` for anything
    else."""
    from perfmodel.errors import InputError
    from perfmodel.profiles import read_gradient_traces, read_validation_csv

    path = Path(source)
    if path.is_file():
        trace = read_validation_csv(path)
        return {trace.batch_size: trace}
    if path.is_dir():
        return read_gradient_traces(path)
    if source in POLLUX_MODELS:
        return read_gradient_traces(pollux_model_dir(source))
    raise InputError(f"no such file, folder or shipped model: expected validation-<B>.csv, a "
                     f"folder or one of {', '.join(POLLUX_MODELS)}", source)
