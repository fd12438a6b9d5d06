"""The bo policy's contention prior: demands inferred from counters through the contention network,
and the co-location slowdown they predict."""

from __future__ import annotations

import numpy as np
import xarray as xr

from bayes_sched.interference.contention_prior import ContentionPrior
from bayes_sched.sim.laws import RunningJob
from bayes_sched.sim.laws.contention import ARTIFACT_NODE, ContentionLaw, job_demands


def _rounds(law: ContentionLaw, layouts: list[dict[str, tuple[str, list[int], int]]],
            prior: ContentionPrior) -> xr.Dataset:
    rng = np.random.default_rng(0)
    windows = []
    for r, layout in enumerate(layouts):
        jobs = {n: RunningJob(app, np.array(c), m) for n, (app, c, m) in layout.items()}
        law.slowdowns(jobs)
        windows.append(law.counters(60.0 * r, 60.0, 4, rng))
        prior.record_round(60.0 * r, 60.0 * (r + 1), {n: j.counts for n, j in jobs.items()},
                           {n: j.application for n, j in jobs.items()})
    return xr.concat(windows, dim="time")


def test_learns_nic_demand_of_distributed_jobs_and_predicts_their_contention() -> None:
    law = ContentionLaw(demand_spread=0.0, seed=3)
    prior = ContentionPrior(ARTIFACT_NODE, [], every=1)
    # Distributed BERT moves between node pairs; single-GPU CIFAR-10 jobs fill other GPUs.
    layouts = [
        {"b": ("bert", [2, 2, 0, 0], 4), "c": ("cifar10", [0, 0, 1, 0], 128)},
        {"b": ("bert", [0, 2, 2, 0], 4), "c": ("cifar10", [1, 0, 0, 0], 128),
         "d": ("cifar10", [0, 0, 0, 2], 128)},
        {"b": ("bert", [0, 0, 2, 2], 4), "c": ("cifar10", [1, 0, 0, 0], 128)},
        {"b": ("bert", [2, 0, 0, 2], 4), "d": ("cifar10", [0, 1, 0, 0], 128)},
    ]
    counters = _rounds(law, layouts, prior)
    prior.update(counters)
    assert prior.known and prior.fits == 1 and prior.problems == []
    bert = prior.applications.index("bert")
    cifar = prior.applications.index("cifar10")
    truth = job_demands("bert", (2, 2), 4, ARTIFACT_NODE)[2]
    learned = prior.demand[bert, 1, 0]
    assert abs(learned - truth) / truth < 0.35
    assert prior.demand[cifar, 0, 0] < 0.2 * truth
    # Two distributed BERT jobs sharing both nodes: the prior predicts a slowdown; alone, none.
    states = np.zeros((2, 2, 4), dtype=np.int16)
    states[0, 0, :2] = 2
    states[0, 1, :2] = 2
    states[1, 0, :2] = 2
    states[1, 1, 2:] = 2
    slow = prior.log_slowdown(states, ["bert", "bert"])
    assert np.all(slow[0] < np.log(0.9)) and np.all(slow[1] == 0.0)


def test_no_counters_means_no_prior() -> None:
    prior = ContentionPrior(ARTIFACT_NODE, ["bert"], every=1)
    prior.update(None)
    states = np.full((1, 2, 2), 2, dtype=np.int16)
    assert not prior.known and np.all(prior.log_slowdown(states, ["bert", "bert"]) == 0.0)


def test_bo_fits_the_contention_posterior_in_the_loop() -> None:
    from bayes_sched.policies import BayesOptPolicy
    from bayes_sched.policies.pollux import GAConfig
    from bayes_sched.sim import SimConfig, Workload, read_workload, run_simulation

    jobs = [job for job in read_workload("workload-1").jobs if job.num_replicas <= 16][:8]
    law = ContentionLaw()
    policy = BayesOptPolicy(ga=GAConfig(population=16, generations=8))
    config = SimConfig(num_nodes=4, gpus_per_node=4, max_time=900.0, hidden=law)
    result = run_simulation(Workload("w1-slice", tuple(jobs)), policy, config, estimators={
        "bo_colocation": {"node_topology": law.topology, "contention_every": 4}})
    assert result.rejected == []
    contention = policy.predictor(ContentionPrior)
    assert contention.fits >= 2 and contention.topology == law.topology
    assert contention.known and contention.problems == []
    assert all("contention_fits" in record.learned for record in policy.history)
