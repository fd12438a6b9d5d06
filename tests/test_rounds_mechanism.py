"""Gavel's round mechanism on its own (``Rounds``): the priority rule, the greedy choice in
priority order, a held lease kept and the others filling nodes in order, the time received
credited from the jobs' reports."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.jobs import BatchLimits, JobSettings, JobView
from bayes_sched.mechanisms.rounds import Rounds, cluster_types, priorities

# Two V100 nodes of 2 GPUs (nodes 0, 1), two K80 nodes of 1 GPU (nodes 2, 3).
SPEC = load_cluster_spec("v100:2x2,k80:2x1")
HALF_ROUND = 180.0


def _view(name: str, gpus: int, held: Sequence[int] = (0, 0, 0, 0),
          attained: float = 0.0) -> JobView:
    return JobView(name=name, application="A3C", submit_time=0.0, age=0.0,
                   attained_service=attained, allocation=np.array(held, dtype=np.int64),
                   num_restarts=0, requested_replicas=gpus, requested_batch_size=32,
                   settings=JobSettings(32, gpus), limits=BatchLimits(1, 1, 1, 1))


def _index(rounds: Rounds, jobs: Sequence[JobView]) -> np.ndarray:
    """The jobs alone as greedy's ``(4, C)`` candidates' index."""
    rows = rounds.store.rows([(job.name,) for job in jobs])
    return np.stack([rows, np.array([job.requested_replicas for job in jobs]), rows,
                     np.full(len(jobs), -1)])


def test_priority_is_the_fraction_over_the_share_of_time_received() -> None:
    fractions = np.array([[0.5, 0.2], [0.25, 0.0], [0.4, 0.3]])
    job_time = np.array([[100.0, 0.0], [300.0, 50.0], [100.0, 10.0]])
    worker_time = np.array([400.0, 0.0])
    runs = np.array([[True, True], [True, True], [True, False]])
    allocated = np.array([True, True, True])
    got = priorities(fractions, job_time, worker_time, runs, allocated)
    # V100: share 1/4, 3/4, 1/4; K80: nothing recorded, so the fraction times 1e9.
    assert np.allclose(got[:, 0], [0.5 / 0.25, 0.25 / 0.75, 0.4 / 0.25])
    assert got[0, 1] == 0.2 * 1e9
    assert got[1, 1] == 0.0 and got[2, 1] == 0.0  # no fraction; cannot run there
    assert not priorities(fractions, job_time, worker_time, runs, ~allocated).any()


def test_a_round_ranks_by_priority_keeps_a_held_lease_and_credits_time_received() -> None:
    cluster = ClusterState(spec=SPEC, now=0.0)
    types = cluster_types(cluster)
    assert types == ("v100", "k80")
    node_types = np.array(cluster.gpu_types)
    rounds = Rounds(types)
    # "a" holds node 1's two V100s; "b" and "c" want one GPU each.
    jobs = [_view("a", 2, held=(0, 2, 0, 0)), _view("b", 1), _view("c", 1)]
    accounted = rounds.account(jobs, node_types, 0.0, HALF_ROUND)
    assert accounted.admitted and not accounted.gone
    combos = [(job.name,) for job in jobs]
    rounds.store.set_allocation(combos, np.array([[1.0, 0.0], [0.1, 0.5], [0.2, 0.9]]))
    runs = np.ones((3, 2), dtype=bool)
    capacities = np.array([2, 1])  # one V100 node already taken elsewhere; one K80 left
    scheduled = rounds.greedy(combos, runs, capacities, [0, 1], set(), _index(rounds, jobs))
    # V100: "a" first (priority 1e9 against 0.2e9, 0.1e9) takes both GPUs; K80: "c" (0.9e9).
    assert scheduled == {0: 0, 2: 1}
    placed = rounds.place(jobs, combos, scheduled, cluster, set())
    assert (placed.extensions, placed.opportunities) == (1, 1)
    assert placed.allocations["a"].tolist() == [0, 2, 0, 0]  # its lease, kept
    assert placed.allocations["c"].tolist() == [0, 0, 1, 0]  # the first K80 node
    assert "b" not in placed.allocations
    # The next round: "a" ran 360 s on its 2 GPUs, "c" 200 of 360 s on its one.
    later = [_view("a", 2, held=(0, 2, 0, 0), attained=720.0),
             _view("c", 1, held=(0, 0, 1, 0), attained=200.0)]
    accounted = rounds.account(later, node_types, 360.0, HALF_ROUND)
    assert accounted.gone == [("b",)] and not accounted.admitted
    store = rounds.store
    assert store.time[store.index[("a",)]].tolist() == [HALF_ROUND + 360.0, HALF_ROUND]
    assert store.time[store.index[("c",)]].tolist() == [HALF_ROUND, HALF_ROUND + 200.0]
    assert rounds.worker_time.tolist() == [360.0, 200.0]
