from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfmodel.datasets import POLLUX_MODELS, pollux_model_dir
from perfmodel.errors import InputError
from perfmodel.profiles import (
    load_pollux_gradients,
    load_pollux_profile,
    read_placements_csv,
    read_step_time_profile,
    read_validation_csv,
)


@pytest.mark.parametrize("model", POLLUX_MODELS)
def test_shipped_profiles_load_with_consistent_configurations(model: str) -> None:
    profile = load_pollux_profile(model)
    assert len(profile) > 500
    assert np.all(profile.num_replicas >= profile.num_nodes)
    assert np.all(profile.compute_time > 0)
    single = profile.placement == "1"
    assert np.all(profile.num_replicas[single] == 1)
    gradients = load_pollux_gradients(model)
    assert len(gradients) >= 6
    assert all(np.all(np.diff(t.progress) >= 0) for t in gradients.values())


def test_placement_digits_give_nodes_and_replicas(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text("placement,local_bsz,step_time,sync_time\n22,8,0.5,0.1\n1114,8,0.9,0.3\n")
    profile = read_placements_csv(path, "m")
    assert profile.num_nodes.tolist() == [2, 4]
    assert profile.num_replicas.tolist() == [4, 7]


def test_project_format_keeps_accumulation_steps(tmp_path: Path) -> None:
    path = tmp_path / "profile.csv"
    path.write_text("num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time\n"
                    "2,8,32,3,1.5,0.2\n")
    profile = read_step_time_profile(path)
    assert profile.accum_steps.tolist() == [3]
    assert profile.placement.tolist() == ["n2r8"]


BAD_FILES = {
    "missing column": ("placement,local_bsz,step_time\n1,8,0.5\n", None, "sync_time"),
    "non-numeric": ("placement,local_bsz,step_time,sync_time\n1,8,fast,0.1\n", 2, "step_time"),
    "negative": ("placement,local_bsz,step_time,sync_time\n1,8,0.5,0.1\n2,8,-1,0.1\n", 3,
                 "step_time"),
    "nan": ("placement,local_bsz,step_time,sync_time\n1,8,nan,0.1\n", 2, "step_time"),
    "empty": ("", None, "empty file"),
    "bad placement": ("placement,local_bsz,step_time,sync_time\nab,8,0.5,0.1\n", 2, "placement"),
    "sync above step": ("placement,local_bsz,step_time,sync_time\n1,8,0.5,0.7\n", 2, "sync_time"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_profiles_name_file_row_and_column(tmp_path: Path, case: str) -> None:
    text, row, needle = BAD_FILES[case]
    path = tmp_path / "placements.csv"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        read_placements_csv(path)
    message = str(error.value)
    assert str(path) in message
    assert needle in message
    if row is not None:
        assert f"row {row}" in message
    assert "\n" not in message


def test_unknown_model_is_named() -> None:
    with pytest.raises(InputError, match="unknown model 'resnet9000'"):
        pollux_model_dir("resnet9000")


def test_validation_rows_must_be_in_training_order(tmp_path: Path) -> None:
    path = tmp_path / "validation-64.csv"
    path.write_text("progress,iteration,metric,grad_sqr,grad_var\n10,1,0.1,1,2\n5,2,0.2,1,2\n")
    with pytest.raises(InputError, match="row 3"):
        read_validation_csv(path)
