"""Sia's certified reuse of its last answer (:mod:`bayes_sched.policies.sia_reuse`): a kept answer
is within the solver's gap of a fresh exact solve, the certificate declines where the feasible
set changed or a utility rose enough to matter, and in a whole run every reused round checks out
against the solver."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

import numpy as np
import pytest

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.policies import make_policy
from bayes_sched.policies.sia import SiaPolicy, config_utilities
from bayes_sched.policies.sia_program import Configurations, solve_assignment_bounded
from bayes_sched.policies.sia_reuse import SolvedAssignment
from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
from bayes_sched.sim.table_run import run_table_simulation

GAP = 1e-4
EXACT = {"mip_rel_gap": 0.0, "time_limit": 30.0}


def _program(rng: np.random.Generator) -> tuple[Configurations, np.ndarray, np.ndarray]:
    """A Sia-like program too big to fit at once: 10-16 rigid jobs of 1-8 GPUs, each on 1-3 of
    three types, 6-12 GPUs per type; its utilities (Sia's, ``p = -0.5``) and capacities."""
    num_jobs = int(rng.integers(10, 17))
    job, gpu_type, gpus = [], [], []
    for j in range(num_jobs):
        size = int(rng.choice([1, 2, 4, 8]))
        for t in sorted(rng.choice(3, size=int(rng.integers(1, 4)), replace=False)):
            job.append(j)
            gpu_type.append(int(t))
            gpus.append(size)
    configs = Configurations(np.array(job), np.array(gpu_type), np.array(gpus),
                             rng.uniform(1.0, 8.0, len(job)))
    utility = config_utilities(configs.goodput * np.array(gpus), -0.5, 1.1)
    return configs, rng.integers(6, 13, 3), utility


def _optimum(utility: np.ndarray, configs: Configurations, capacities: np.ndarray,
             num_jobs: int) -> float:
    got = solve_assignment_bounded(utility, configs, capacities, num_jobs, "HIGHS", EXACT)
    assert got is not None
    return float(utility[got[0][got[0] >= 0]].sum())


def test_a_reused_answer_is_within_the_gap_of_a_fresh_solve_and_large_gains_are_declined() -> None:
    """Many programs, each solved, then its utilities raised (ageing raises a running job's
    other configurations): wherever the certificate keeps the answer, a fresh exact solve does
    no better than the gap allows; small rises are certified, rises that change the optimum
    are not."""
    rng = np.random.default_rng(0)
    kept, declined = 0, 0
    for _ in range(40):
        configs, capacities, utility = _program(rng)
        num_jobs = int(configs.job.max()) + 1
        got = solve_assignment_bounded(utility, configs, capacities, num_jobs, "HIGHS",
                                       {"mip_rel_gap": GAP})
        assert got is not None
        solved = SolvedAssignment(configs, capacities, utility, got[1], got[0])
        for scale in (1e-7, 1e-5, 1e-2, 0.5):
            raised = utility + scale * rng.uniform(0.0, 1.0, len(utility))
            answer = solved.reuse(raised, configs, capacities, num_jobs, GAP)
            if answer is None:
                declined += 1
                continue
            kept += 1
            value = float(raised[answer[answer >= 0]].sum())
            assert _optimum(raised, configs, capacities, num_jobs) <= value * (1 + GAP) + 1e-9
    assert kept >= 40 and declined >= 40  # both sides of the certificate are exercised


def test_the_certificate_declines_a_changed_feasible_set_or_an_unknown_bound() -> None:
    rng = np.random.default_rng(1)
    configs, capacities, utility = _program(rng)
    num_jobs = int(configs.job.max()) + 1
    got = solve_assignment_bounded(utility, configs, capacities, num_jobs)
    assert got is not None
    solved = SolvedAssignment(configs, capacities, utility, got[1], got[0])
    assert solved.reuse(utility, configs, capacities, num_jobs, GAP) is not None
    assert solved.reuse(utility, configs, capacities + np.array([1, 0, 0]), num_jobs,
                        GAP) is None
    assert solved.reuse(utility, configs, capacities, num_jobs + 1, GAP) is None
    moved = replace(configs, gpu_type=(configs.gpu_type + 1) % 3)
    assert solved.reuse(utility, moved, capacities, num_jobs, GAP) is None
    unbounded = SolvedAssignment(configs, capacities, utility, float("inf"), got[0])
    assert unbounded.reuse(utility, configs, capacities, num_jobs, GAP) is None


@pytest.mark.parametrize("split", [{}, {"partitions": 4}], ids=["exact", "pop"])
def test_every_reused_round_of_a_run_is_as_good_as_the_solver_would_give(
        monkeypatch, split: dict[str, int]) -> None:
    """A 120-job run in Gavel's continuous setting: Sia reuses answers in some rounds, and in
    each of them a fresh exact solve of that round's program does no better than the gap;
    with ``certified_reuse=False`` it solves those rounds instead. Under POP (sticky groups,
    the default) each sub-problem reuses its own answers so."""
    checked: list[float] = []
    reuse = SolvedAssignment.reuse

    def checking(self: SolvedAssignment, utility: np.ndarray, configs: Configurations,
                 capacities: np.ndarray, num_jobs: int, rel_gap: float) -> np.ndarray | None:
        answer = reuse(self, utility, configs, capacities, num_jobs, rel_gap)
        if answer is not None:
            value = float(utility[answer[answer >= 0]].sum())
            best = _optimum(utility, configs, capacities, num_jobs)
            assert best <= value * (1 + rel_gap) + 1e-9
            checked.append(best / value - 1)
        return answer

    monkeypatch.setattr(SolvedAssignment, "reuse", checking)
    spec = replace(load_cluster_spec("v100:36,p100:36,k80:36"), round_interval=360.0)
    policy = make_policy("sia", seed=0, **split)
    assert isinstance(policy, SiaPolicy)
    run_table_simulation(islice(generate_continuous_jobs(2.6, 0, multi_gpu=True), 120), policy,
                         spec, jobs_to_complete=[str(i) for i in range(120)])
    assert policy.reused == len(checked) > 0 and policy.ilp_solves > 0
    assert policy.stats()["reused_answers"] == policy.reused
    solving = make_policy("sia", seed=0, certified_reuse=False, **split)
    assert isinstance(solving, SiaPolicy)
    run_table_simulation(islice(generate_continuous_jobs(2.6, 0, multi_gpu=True), 120), solving,
                         spec, jobs_to_complete=[str(i) for i in range(120)])
    assert solving.reused == 0 and solving.ilp_solves > policy.ilp_solves
