"""Per-GPU-type profile folders in both layouts, built from the shipped cifar10 profile (its
placements file copied as a 't4' measurement, and a 'v100' one with step and sync times halved)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from perfmodel.datasets import pollux_model_dir
from perfmodel.errors import InputError
from perfmodel.profiles import read_step_time_profile
from perfmodel.typed_profiles import read_typed_profiles


def _halved(source: Path, target: Path) -> None:
    lines = source.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        placement, bsz, step, sync = line.split(",")
        out.append(f"{placement},{bsz},{float(step) / 2!r},{float(sync) / 2!r}")
    target.write_text("\n".join(out) + "\n")


def test_both_layouts_give_each_model_its_profile_per_type(tmp_path: Path) -> None:
    shipped = pollux_model_dir("cifar10") / "placements.csv"
    by_type = tmp_path / "by-type"
    (by_type / "t4" / "cifar10").mkdir(parents=True)
    (by_type / "v100" / "cifar10").mkdir(parents=True)
    shutil.copy(shipped, by_type / "t4" / "cifar10" / "placements.csv")
    _halved(shipped, by_type / "v100" / "cifar10" / "placements.csv")
    by_model = tmp_path / "by-model" / "cifar10"
    by_model.mkdir(parents=True)
    shutil.copy(shipped, by_model / "placements-t4.csv")
    _halved(shipped, by_model / "placements-v100.csv")
    shutil.copy(pollux_model_dir("cifar10") / "scalability.csv", by_model / "scalability.csv")

    first = read_typed_profiles(by_type)
    second = read_typed_profiles(tmp_path / "by-model")
    assert set(first) == {"cifar10"} and set(first["cifar10"]) == {"t4", "v100"}
    assert set(second["cifar10"]) == {"t4", "v100", None}   # untyped scalability.csv kept apart
    for profiles in (first["cifar10"], second["cifar10"]):
        np.testing.assert_allclose(profiles["v100"].step_time, profiles["t4"].step_time / 2)
    assert len(second["cifar10"][None]) > 0
    # A folder of typed files is not one profile: mixing types would be silently wrong.
    with pytest.raises(InputError, match="per-GPU-type"):
        read_step_time_profile(by_model)
    (by_type / "t4" / "stray.csv").write_text("x\n1\n")
    with pytest.raises(InputError, match="model folders and CSV files"):
        read_typed_profiles(by_type)
    with pytest.raises(InputError, match="no per-type profiles"):
        read_typed_profiles(tmp_path / "by-model" / "cifar10")
