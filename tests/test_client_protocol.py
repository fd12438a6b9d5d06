"""The job directory channel between a backend and the training client (real files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bayes_sched.backends.launcher import LaunchSpec, rank_layout
from bayes_sched.client.protocol import (
    CONTROL_FILE,
    REPORTS_FILE,
    Control,
    append_report,
    read_control,
    read_reports,
    write_control,
)


def test_control_round_trips_and_is_replaced_whole(tmp_path: Path) -> None:
    assert read_control(tmp_path) is None
    write_control(tmp_path, Control(local_bsz=32, accum_steps=1, version=1))
    write_control(tmp_path, Control(local_bsz=64, checkpoint_request=3, version=2))
    assert read_control(tmp_path) == Control(local_bsz=64, accum_steps=0, checkpoint_request=3,
                                             version=2)
    assert [p.name for p in tmp_path.iterdir()] == [CONTROL_FILE]  # no temporary file left


@pytest.mark.parametrize("text, expected", [
    ("{", "not JSON"),
    ("[1]", "expected a JSON object"),
    ('{"local_bsz": 0}', "'local_bsz': expected >= 1"),
    ('{"local_bsz": 8, "accum_steps": 1.5}', "'accum_steps': expected an integer"),
    ('{"local_bsz": 8, "speed": 2}', "unknown field 'speed'"),
])
def test_bad_control_names_the_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / CONTROL_FILE).write_text(text)
    with pytest.raises(ValueError, match=expected) as info:
        read_control(tmp_path)
    assert str(tmp_path / CONTROL_FILE) in str(info.value)


def test_reports_are_read_incrementally_and_a_torn_line_waits(tmp_path: Path) -> None:
    append_report(tmp_path, "step", placement="2", local_bsz=16, step_time=0.25)
    reports, offset = read_reports(tmp_path)
    assert reports == [{"kind": "step", "placement": "2", "local_bsz": 16, "step_time": 0.25}]
    path = tmp_path / REPORTS_FILE
    with path.open("a") as stream:  # a writer killed mid-line, then junk a buggy job wrote
        stream.write('not json\n{"kind": "nonsense"}\n{"kind": "step", "step_time": NaN}\n'
                     '{"kind": "progress", "ep')
    reports, offset2 = read_reports(tmp_path, offset)
    assert reports == [] and offset2 < path.stat().st_size
    with path.open("a") as stream:
        stream.write('ochs": 1.5}\n')
    reports, offset3 = read_reports(tmp_path, offset2)
    assert reports == [{"kind": "progress", "epochs": 1.5}]
    assert offset3 == path.stat().st_size
    assert read_reports(tmp_path, offset3) == ([], offset3)


def test_append_refuses_unknown_kinds_and_non_finite_numbers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="report kind 'speed'"):
        append_report(tmp_path, "speed", value=1)
    with pytest.raises(ValueError, match="'step_time': expected a finite number"):
        append_report(tmp_path, "step", step_time=float("inf"))
    assert not (tmp_path / REPORTS_FILE).exists()


def test_launch_spec_placement_and_rank_layout() -> None:
    spec = LaunchSpec("j", ("python", "t.py"), (2, 0, 1), job_dir="/tmp/j")
    assert spec.placement == "21" and spec.world_size == 3
    assert rank_layout(spec.gpus_per_node) == [(0, 0, 0), (0, 1, 1), (2, 0, 2)]
    assert json.loads(json.dumps(list(spec.argv))) == ["python", "t.py"]


def test_replica_logs_sort_by_attempt_and_the_latest_is_the_newest_starts(tmp_path: Path) -> None:
    import os

    from bayes_sched.client.protocol import latest_log, replica_log_path, replica_logs

    assert replica_logs(tmp_path) == [] and latest_log(tmp_path) is None
    for attempt, rank in ((2, 0), (10, 1), (10, 0), (1, 0)):
        path = replica_log_path(tmp_path, attempt, rank)
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"attempt {attempt} rank {rank}\n")
    (tmp_path / "logs" / "notes.log").write_text("not a replica's")
    assert [(a, r) for a, r, _ in replica_logs(tmp_path)] == [(1, 0), (2, 0), (10, 0), (10, 1)]
    # Of attempt 10 (not 2, which sorts after it by name), the one written last.
    os.utime(replica_log_path(tmp_path, 10, 1), ns=(0, 10**18))  # rank 1 wrote long ago
    assert latest_log(tmp_path) == replica_log_path(tmp_path, 10, 0)
