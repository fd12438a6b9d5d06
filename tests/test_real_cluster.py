"""The shared real-cluster backend without starting jobs: allocations follow their nodes by id
when the cluster's nodes change (the Ray test removes a real node); real collectors' counters
reach the cluster state each round."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.backends.local import LOCAL_NODE_ID, LocalLauncher
from bayes_sched.backends.real_cluster import RealCluster, follow_nodes
from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_allocations_follow_their_nodes_by_id() -> None:
    # a node left (b), one came (d), the rest moved up: counts go with their nodes
    assert follow_nodes([1, 2, 0], ["a", "b", "c"], ["c", "a", "d"]) == ([0, 1, 0], ["b"])
    assert follow_nodes([0, 0, 3], ["a", "b", "c"], ["a", "c"]) == ([0, 3], [])
    assert follow_nodes([0, 0], ["a", "b"], []) == ([], [])
    assert follow_nodes([], ["a", "b"], ["a"]) == ([0], [])  # none allocated yet


def test_a_restored_job_whose_node_left_waits_for_gpus_without_a_failure(tmp_path: Path) -> None:
    launcher = LocalLauncher(2)
    assert launcher.node_ids == (LOCAL_NODE_ID,)
    first = RealCluster(launcher, tmp_path / "jobs")
    for name in ("away", "here"):
        first.submit(RealJobSpec(name, ("true",), 32, 256, 64, 1))
    snapshot = first.snapshot()
    assert [r["nodes"] for r in snapshot] == [[LOCAL_NODE_ID]] * 2
    # As saved by a scheduler that saw two nodes, the first since gone: "away" ran there.
    snapshot[0].update(status="running", allocation=[1, 0], nodes=["gone", LOCAL_NODE_ID],
                       attempt=1)
    snapshot[1].update(status="backoff", allocation=[0, 2], nodes=["gone", LOCAL_NODE_ID],
                       retry_at=1e9)
    second = RealCluster(launcher, tmp_path / "jobs")
    assert second.restore(snapshot) == []
    away, here = second.records["away"], second.records["here"]
    assert away.status == "pending" and away.allocation == [0] and away.failures == 0
    assert "its node (gone) left the cluster" in away.reason
    assert here.status == "backoff" and here.allocation == [2]  # its node stayed: kept
    assert second.allocations()["here"].tolist() == [2]


# --- counters: the nodes' collectors feed the cluster state ---------------------------------------

def test_counters_of_real_collectors_reach_the_cluster_state_each_round(tmp_path: Path) -> None:
    """Two real collector runs (procfs, as two nodes) write their stores under one directory;
    each round the backend reads the latest window of both, aligned onto one grid, into the
    state the policy sees. A store that cannot be read is left out with a note, never an error."""
    import socket

    import numpy as np

    from bayes_sched.backends.counters_feed import CountersFeed
    from counters import schema

    stores = tmp_path / "counters"
    here = socket.gethostname()  # what a collector on this machine records by default
    runs = [subprocess.Popen(
        [sys.executable, "-m", "bayes_sched", "collect", "--sources", "procfs", "--interval",
         "0.1", "--samples", "6", "--out", str(stores / store), "--node", node, "--quiet"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
        for store, node in (("node-a", here), ("node-b", "node-b"))]
    for run in runs:
        assert run.wait(timeout=120) == 0, run.stderr.read() if run.stderr else ""
    (stores / "not-a-store").mkdir()
    cluster = RealCluster(LocalLauncher(1), tmp_path / "jobs",
                          counters=CountersFeed(stores, window_seconds=0.25))
    assert cluster.state.counters is None  # nothing read before the first round
    cluster.advance(0.0)
    counters = cluster.state.counters
    assert counters is not None
    # Keyed as the cluster's nodes are: this machine's host name is the local node; a name
    # that matches no node is kept, and noted.
    assert counters[schema.NODE].values.tolist() == ["local", "node-b"]
    assert cluster.node_ids == ("local",)
    assert cluster.counters is not None and "node(s) node-b match no node" in \
        cluster.counters.problems[-1]
    seconds = schema.time_to_seconds(counters[schema.TIME].values)
    assert 1 <= seconds.size <= 4 and np.all(np.diff(seconds) > 0)  # the newest 0.25 s
    assert abs(time.time() - seconds[-1]) < 300  # wall-clock time (cluster time 0 is its epoch)
    assert counters.attrs["interval_s"] > 0 and "cpu_user" in counters
    assert np.isfinite(counters["memory_total"].values).any()
    assert not schema.problems(counters, check_values=False)
    # One node's store damaged: the other's counters still arrive; the damage is noted.
    (stores / "node-b" / "bayes-sched-store.json").write_text("{")
    cluster.advance(0.0)
    counters = cluster.state.counters
    assert counters is not None and counters[schema.NODE].values.tolist() == ["local"]
    assert cluster.counters is not None and "node-b" in cluster.counters.problems[-1]
    assert "left out this round" in cluster.counters.problems[-1]


def test_serve_refuses_a_counters_flag_that_names_no_directory(tmp_path: Path) -> None:
    done = run_cli("serve", "--gpus", "1", "--counters", str(tmp_path / "missing"), "--state",
                   str(tmp_path / "state"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--counters" in done.stderr and "not a directory" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "state").exists()


def test_the_cluster_state_carries_the_clusters_time_origin(tmp_path: Path) -> None:
    """Counters carry wall-clock times; the state says which one the cluster's time 0 is."""
    cluster = RealCluster(LocalLauncher(1), tmp_path / "jobs", epoch=1_700_000_000.0)
    assert cluster.state.time_origin == 1_700_000_000.0
