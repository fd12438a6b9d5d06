"""The event tracker names each transition of a job's saved records, in the order the cluster
saves them (tests/test_serve_events.py runs the kinds a real job goes through; here the ones a
small local run rarely shows: shrunk, moved, preempted, a node lost, cancelled, a failure's log
read from the job's log file, a restarted service reporting nothing twice)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from bayes_sched.backends.real_cluster import JobRecord
from bayes_sched.client.protocol import replica_log_path
from bayes_sched.service.events import EventTracker
from tests.state_files import spec

TYPES = ("a100", "a100", "t4")


def _saves(tracker: EventTracker, *records: JobRecord) -> list[tuple[str, str]]:
    """The (kind, message) of the events of successive saves of one job's record."""
    found = []
    for record in records:
        found += [(e.kind, e.message) for e in tracker.update([record.to_dict()], TYPES, 0.0)]
    return found


def _running(attempt: int, allocation: list[int], **fields: Any) -> JobRecord:
    values: dict[str, Any] = {"local_bsz": 16, "accum_steps": 1, **fields}
    return JobRecord(spec("j"), 0.0, status="running", attempt=attempt, allocation=allocation,
                     nodes=["n0", "n1", "n2"], **values)


def test_reallocations_preemption_and_cancel(tmp_path: Path) -> None:
    tracker = EventTracker([], tmp_path)
    on_two = _running(1, [2, 0, 0])
    stopping = replace(on_two, stopping=True)  # saved before the SIGTERM
    stopped = replace(on_two, status="pending")
    on_one = _running(2, [0, 0, 1], num_restarts=1, local_bsz=32)
    moved = _running(3, [0, 1, 0], num_restarts=2, local_bsz=32)
    preempted = replace(moved, status="pending", allocation=[0, 0, 0])
    events = _saves(tracker, on_two, stopping, stopped, on_one, replace(on_one, status="pending"),
                    moved, replace(moved, status="pending"), preempted,
                    replace(preempted, status="cancelled", reason="cancelled by the user"))
    assert [kind for kind, _ in events] == ["submitted", "started", "shrunk", "moved",
                                            "preempted", "cancelled"]
    assert events[1][1] == "2 GPUs (a100) on 1 node [2], batch 16x2x2"
    assert events[2][1] == "2 -> 1 GPU (t4) on 1 node [1], batch 32x2x1 (from its checkpoint)"
    assert events[5][1] == "cancelled by the user"


def test_node_lost_batch_change_checkpoint_and_failure_tail(tmp_path: Path) -> None:
    tracker = EventTracker([], tmp_path)
    running = _running(1, [1, 1, 0])
    rebatched = replace(running, local_bsz=24, checkpoint_acked=1, epochs=0.5)
    stopped = replace(rebatched, status="pending")
    lost = replace(stopped, allocation=[0, 0, 0],
                   reason="its node (n1) left the cluster; waiting to restart from its checkpoint")
    again = replace(lost, status="running", attempt=2, allocation=[2, 0, 0], num_restarts=1)
    log = replica_log_path(tmp_path / "j", 1, 0)
    log.parent.mkdir(parents=True)
    log.write_text("step 1\n\nValueError: bad batch\n")
    failed = replace(again, status="failed", allocation=[0, 0, 0],
                     reason="exited with status 1, 4 times; log tail:\n")  # nothing quoted
    events = _saves(tracker, running, rebatched, stopped, lost, again, failed)
    assert [kind for kind, _ in events] == ["submitted", "started", "checkpoint", "batch",
                                            "stopped", "restarted", "failed"]
    assert events[3][1] == "16x2x2 -> 24x2x2 (its model predicts more goodput)"
    assert events[4][1].startswith("its node (n1) left the cluster")
    assert events[5][1].endswith("after: its node (n1) left the cluster; waiting to restart "
                                 "from its checkpoint")
    assert tracker.update([failed.to_dict()], TYPES, 0.0) == []  # reported once
    last = EventTracker([], tmp_path).update([failed.to_dict()], TYPES, 0.0)[-1]
    assert last.kind == "failed" and last.message == "exited with status 1, 4 times"
    assert last.detail["log_tail"] == ["step 1", "ValueError: bad batch"]  # from the log file


def test_a_restarted_service_reports_nothing_twice(tmp_path: Path) -> None:
    running = _running(1, [1, 0, 0])
    tracker = EventTracker([running.to_dict()], tmp_path)  # the records the state holds
    assert tracker.update([running.to_dict()], TYPES, 0.0) == []
    grown = _running(2, [2, 0, 0], num_restarts=1)
    stopped = replace(running, status="pending")
    assert [e.kind for e in (tracker.update([stopped.to_dict()], TYPES, 0.0)
                             + tracker.update([grown.to_dict()], TYPES, 0.0))] == ["grown"]
