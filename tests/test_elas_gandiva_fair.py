"""E-LAS (priority order on a crafted case, admission and preemption) and Gandiva-fair (equal
shares, then trades that leave every job at least its fair-share steps/s)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState, validate_allocations
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.policies import make_policy
from bayes_sched.policies.elas import ElasPolicy, elas_priority, epoch_progress
from bayes_sched.policies.gandiva_fair import trade_shares
from bayes_sched.policies.gavel.time_sharing import equal_split
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
ORACLE = oracle_estimates(TABLE)  # the truth, as the world's oracle publishes it


def test_elas_orders_by_service_times_work_left_and_preempts() -> None:
    """Five jobs on one node of four GPUs. Priority = GPU-seconds x (1 - progress): c (new) 0,
    a (1000 GPU-s, 90 % done) 100, e (200 GPU-s, 25 % done) 150, b (500, 0 %) 500, d (2000,
    50 %) 1000. The four GPUs go to c, a and e; plain LAS (c, e, b, a, d) would have run b
    instead of a. a keeps the GPU it holds; b, running before, is preempted."""
    spec = replace(load_cluster_spec("v100:1x4"), round_interval=360.0)
    jobs = [make_job(n, 0.0, "ResNet-18 (batch size 64)", size, 100.0)
            for n, size in [("a", 1), ("b", 1), ("c", 2), ("d", 2), ("e", 1)]]
    views = {v.name: v for v in TableCluster(jobs, spec, TABLE).job_views()}
    state = {"a": (1000.0, 90.0, [1]), "b": (500.0, 0.0, [1]), "c": (0.0, 0.0, [0]),
             "d": (2000.0, 50.0, [0]), "e": (200.0, 25.0, [0])}
    views = {n: replace(views[n], attained_service=s, progress=p, allocation=np.array(held))
             for n, (s, p, held) in state.items()}
    policy = ElasPolicy()
    assert [v.name for v in policy.order(list(views.values()))] == ["c", "a", "e", "b", "d"]
    assert elas_priority(views["a"]) == pytest.approx(100.0)
    assert elas_priority(views["e"]) == pytest.approx(150.0)
    cluster = ClusterState(spec=spec, now=3600.0)
    decision = policy.decide(cluster, list(views.values()), ORACLE)
    validate_allocations(decision, cluster, list(views))
    assert set(decision) == {"a", "c", "e"}
    assert decision["a"].tolist() == [1] and decision["c"].tolist() == [2]


def test_elas_reads_epochs_where_no_steps_are_declared() -> None:
    spec = load_cluster_spec("v100:1x4")
    view = TableCluster([make_job("x", 0.0, "A3C", 1, 100.0)], spec, TABLE).job_views()[0]
    pollux_like = replace(view, target_steps=None, epochs=3.0, target_epochs=12)
    assert epoch_progress(pollux_like) == pytest.approx(0.25)
    assert epoch_progress(replace(pollux_like, epochs=20.0)) == 1.0
    assert epoch_progress(replace(view, progress=25.0)) == pytest.approx(0.25)


def _gandiva_fair(job_types: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Gandiva-fair's fractions ``(J, 2)`` and the jobs' steps/s ``(J, 2)`` for single-GPU jobs
    on 2 V100 + 2 K80."""
    spec = replace(load_cluster_spec("v100:1x2,k80:1x2"), round_interval=360.0)
    jobs = [make_job(str(i), 0.0, t, 1, 1e9) for i, t in enumerate(job_types)]
    policy = make_policy("gandiva_fair")
    cluster = ClusterState(spec=spec, now=360.0)
    views = TableCluster(jobs, spec, TABLE).job_views()
    validate_allocations(policy.decide(cluster, views, ORACLE), cluster, [v.name for v in views])
    x = np.array([[policy.fractions()[str(i)][t] for t in ("v100", "k80")]
                  for i in range(len(jobs))])
    rates = np.array([[TABLE.steps_per_second(t, 1, g) for g in ("v100", "k80")]
                      for t in job_types])
    return x, rates


def test_gandiva_fair_trades_fast_share_to_the_jobs_that_gain_most() -> None:
    """Eight single-GPU jobs on 2 V100 + 2 K80, four of CycleGAN (V100 8.8x faster than K80) and
    four of Recommendation (0.7x): each starts with a quarter of a GPU of each type. After
    trading, CycleGAN holds more V100 time and Recommendation more K80 time, each type's GPUs
    are given out exactly as before, no job runs slower than on its equal share and every
    CycleGAN job (a buyer) runs faster."""
    types = ["CycleGAN", "Recommendation (batch size 1024)"] * 4
    x, rates = _gandiva_fair(types)
    fair = equal_split(np.ones(8), np.array([2.0, 2.0]))
    assert np.allclose(x.sum(axis=0), fair.sum(axis=0))  # each type's GPUs, unchanged
    assert np.all(x.sum(axis=1) <= 1 + 1e-9) and np.all(x >= 0)
    gained = (rates * x).sum(axis=1) / (rates * fair).sum(axis=1)
    assert np.all(gained >= 1.0 - 1e-9), gained
    assert np.all(gained[0::2] > 1.01) and gained[1::2].max() > 1.01
    assert x[0::2, 0].sum() > fair[0::2, 0].sum() + 0.1  # CycleGAN: more V100
    assert x[1::2, 1].sum() > fair[1::2, 1].sum() + 0.1  # Recommendation: more K80


def test_gandiva_fair_does_not_trade_between_equal_speedups() -> None:
    """Jobs of one type gain nothing by trading: the shares stay equal."""
    x, _ = _gandiva_fair(["A3C"] * 6)
    assert np.allclose(x, equal_split(np.ones(6), np.array([2.0, 2.0])))


def test_a_trade_needs_room_on_the_side_that_receives_more_gpus() -> None:
    """Two single-GPU users already holding a full GPU each cannot trade at a price above 1 (the
    seller would hold more than one GPU at a time)."""
    shares = np.array([[0.5, 0.5], [0.5, 0.5]])
    rates = np.array([[8.0, 1.0], [2.0, 1.0]])
    assert np.allclose(trade_shares(shares, rates, np.ones(2), [(0, 1)]), shares)


def test_gandiva_fair_time_split_is_shockwaves_baseline() -> None:
    """``split="time"`` (Shockwave's GandivaFairProportional): every job the same time fraction
    (GPUs / jobs) whatever its GPU count; the default splits the GPUs, so a job of 4 GPUs gets a
    quarter of a 1-GPU job's fraction. A bad split is a one-line error."""
    spec = replace(load_cluster_spec("v100:2x4"), round_interval=120.0)
    sizes = [1, 2, 4] * 4
    jobs = [make_job(str(i), 0.0, "ResNet-18 (batch size 64)", s, 1e9)
            for i, s in enumerate(sizes)]
    views = TableCluster(jobs, spec, TABLE).job_views()
    state = ClusterState(spec=spec, now=120.0)
    fractions = {}
    for split in ("time", "gpus"):
        policy = make_policy("gandiva_fair", split=split)
        policy.decide(state, views, ORACLE)
        fractions[split] = np.array([policy.fractions()[str(i)]["v100"]
                                     for i in range(len(sizes))])
    assert np.allclose(fractions["time"], 8 / len(sizes))
    assert np.allclose(fractions["gpus"] * np.array(sizes), 8 / len(sizes))
    with pytest.raises(ValueError, match="split"):
        make_policy("gandiva_fair", split="tickets")


def test_elas_moves_a_job_off_a_gpu_type_where_it_failed_to_launch() -> None:
    """ResNet-50 at batch 128 on 2 GPUs does not fit a K80 (Gavel's table: 0 steps/s). E-LAS
    first places it on the type with the most free GPUs, K80; the launch fails, the job reports
    it, and from the next round it runs on the V100s and finishes. Before E-LAS read failed
    launches it held the K80s for ever (no service gained, so its priority never fell)."""
    spec = replace(load_cluster_spec("v100:1x2,k80:1x4"), round_interval=360.0)
    steps = 4.0 * 3600.0  # about an hour on two V100s (4.2 steps/s)
    jobs = [make_job("r", 0.0, "ResNet-50 (batch size 128)", 2, steps),
            make_job("s", 0.0, "ResNet-50 (batch size 128)", 2, steps)]
    policy = ElasPolicy()
    result = run_table_simulation(jobs, policy, spec, TABLE, max_time=48 * 3600.0)
    assert result.summary["finished"] == 2.0
    assert policy.failed_types(TableCluster(jobs, spec, TABLE).job_views()[0]) == {"k80"}
    # One wasted round on the K80s (both jobs' first choice), then the two share the V100s in
    # turn: the second finishes within a few hours, not at the 48 h cut-off.
    assert result.summary["makespan"] < 4 * 3600.0
