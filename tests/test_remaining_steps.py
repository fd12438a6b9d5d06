"""Remaining steps of jobs that may end early: the survival estimator's posterior learns the
law jobs end by as they end, its predictive mean and draws agree, ``declared`` / ``ignored`` /
the oracle reach the policies that read them, SRTF ranks by them, and bad options are one line."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimation.registry import make_estimator
from bayes_sched.estimation.remaining_steps import (
    SurvivalPredictor,
    SurvivalSteps,
    mean_fraction_left,
)
from bayes_sched.jobs import JobView
from bayes_sched.policies import make_policy
from bayes_sched.remaining_work import REMAINING_STEPS, gittins_rank
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.sim.tenant_workload import generate_tenant_jobs
from bayes_sched.throughputs import load_gavel_throughputs
from tests.cli_inprocess import run_cli

TABLE = load_gavel_throughputs()
SPEC = replace(load_cluster_spec("v100:1x4"), round_interval=60.0)
BASE = TableCluster([make_job("x", 0.0, "A3C", 1, 1000.0)], SPEC, TABLE).job_views()[0]
DECLARED, STEP_PER_ROUND = 1000.0, 50.0
CELL = Cell("A3C", 1, "v100", None)


def _view(name: str, done: float, tenant: str = "t") -> JobView:
    report = CellObservation(CELL, STEP_PER_ROUND / SPEC.round_interval, SPEC.round_interval)
    return replace(BASE, name=name, progress=done, target_steps=DECLARED, tenant=tenant,
                   cell_observations=(report,) if done > 0 else ())


def _learn(laws: dict[str, tuple[float, float]], rounds: int, seed: int = 0,
           group: str = "all") -> list[tuple[int, SurvivalPredictor]]:
    """Jobs of each tenant's law ``(pi, theta)`` (runs its declaration with probability ``pi``,
    else stops at a fraction ``U ** (1 / theta)``), three per tenant arriving a round, each
    running 50 steps a round; the estimator's predictor after each round, with the number of
    jobs that had ended by then."""
    rng = random.Random(seed)
    estimator = SurvivalSteps(group=group)  # type: ignore[arg-type]
    ends: dict[str, float] = {}
    done: dict[str, tuple[str, float]] = {}
    out = []
    for r in range(rounds):
        for tenant, (pi, theta) in laws.items():
            for k in range(3):
                name = f"{tenant}{r}-{k}"
                fraction = 1.0 if rng.random() < pi else rng.random() ** (1.0 / theta)
                ends[name], done[name] = max(fraction * DECLARED, 1.0), (tenant, 0.0)
        views = [_view(n, d, t) for n, (t, d) in done.items()]
        estimator.estimate(ClusterState(spec=SPEC, now=r * SPEC.round_interval), views)
        (entry,) = estimator.published()
        out.append((int(estimator.stats()["survival_ended"]), entry.value))
        for name, (tenant, steps) in list(done.items()):
            steps = min(steps + STEP_PER_ROUND, ends[name])
            done[name] = (tenant, steps)
            if steps >= ends[name]:
                del done[name]
    return out


def test_the_survival_posterior_moves_toward_the_truth_as_jobs_end() -> None:
    pi, theta = 0.6, 0.4
    history = _learn({"t": (pi, theta)}, rounds=120)
    early = next(pred for ended, pred in history if ended >= 5).summary("")
    late = history[-1][1].summary("")
    assert history[-1][0] > 150  # jobs that ended and taught it
    assert abs(late["pi"] - pi) < abs(early["pi"] - pi) or abs(late["pi"] - pi) < 0.03
    assert abs(late["pi"] - pi) < 2.5 * late["pi_sd"] + 0.02
    assert late["pi_sd"] < early["pi_sd"] and late["theta_sd"] < early["theta_sd"]
    assert abs(math.log(late["theta"] / theta)) < 0.4
    # Its prediction for a job half done approaches the law's E[U - a | U > a].
    truth = DECLARED * float(mean_fraction_left(np.array([[pi]]), np.array([[theta]]), 0.5)[0, 0])
    predicted = history[-1][1].remaining_steps(_view("probe", 500.0))
    assert predicted == pytest.approx(truth, rel=0.1)


def test_survival_mean_quantiles_and_draws_agree() -> None:
    predictor = _learn({"t": (0.5, 0.7)}, rounds=60, seed=1)[-1][1]
    posterior = predictor.posterior(_view("probe", 300.0))
    draws = posterior.draws(4000, seed=3)
    assert draws.min() >= 0.0 and draws.max() <= DECLARED * 0.7 + 1e-9
    assert float(draws.mean()) == pytest.approx(float(posterior.mean()), rel=0.05)
    assert float(posterior.quantile(0.1)) <= float(posterior.quantile(0.9))
    assert float(posterior.quantile(1.0)) == pytest.approx(DECLARED * 0.7)
    # No declared length: it cannot say; at its declaration: nothing left.
    assert math.isnan(predictor.remaining_steps(replace(BASE, target_steps=None)))
    assert predictor.remaining_steps(replace(BASE, progress=DECLARED)) == 0.0


def test_groups_learn_apart_and_borrow_when_they_have_no_history() -> None:
    # Tenant "a": jobs that nearly all stop early; "b": jobs that nearly all run to the end.
    predictor = _learn({"a": (0.05, 1.0), "b": (0.95, 1.0)}, rounds=60, group="tenant")[-1][1]
    assert predictor.summary("a")["pi"] < 0.3 and predictor.summary("b")["pi"] > 0.7
    fresh_a, fresh_b = _view("new-a", 0.0, "a"), _view("new-b", 0.0, "b")
    assert predictor.remaining_steps(fresh_a) < 0.75 * predictor.remaining_steps(fresh_b)
    unseen = predictor.remaining_steps(_view("new-c", 0.0, "c"))
    assert predictor.remaining_steps(fresh_a) < unseen < predictor.remaining_steps(fresh_b)


def test_declared_ignored_and_the_oracle_reach_the_policies() -> None:
    jobs = generate_tenant_jobs(8, seed=2)
    view = replace(BASE, progress=100.0)
    declared = make_estimator("declared").published()[0].value
    assert declared.remaining_steps(view) == 900.0
    assert math.isnan(make_estimator("ignored").published()[0].value.remaining_steps(view))
    spec = replace(load_cluster_spec("v100:2x4"), round_interval=360.0)
    runs = {name: run_table_simulation(jobs, make_policy("finish_time_fairness"), spec,
                                       estimators={"remaining_steps": name},
                                       measurement_noise=0.0)
            for name in ("declared", "ignored", "oracle_remaining_steps")}
    assert runs["declared"].estimates_from["remaining_steps"] == "declared"
    assert runs["oracle_remaining_steps"].estimates_from["remaining_steps"] == "oracle"
    # Ignored: no job's remaining steps are known, so FTF splits time equally (its fallback).
    assert runs["ignored"].summary["fallback_allocations"] >= 1
    assert runs["declared"].summary["fallback_allocations"] == 0
    assert all(run.jobs["jct"].notna().all() for run in runs.values())


class _Known:
    def __init__(self, left: dict[str, float]) -> None:
        self.left = left

    def remaining_steps(self, job: JobView) -> float:
        return self.left[job.name]

    def posterior(self, job: JobView) -> object:
        raise NotImplementedError


def test_srtf_ranks_by_remaining_gpu_seconds_and_is_las_when_ignored() -> None:
    policy = make_policy("srtf")
    views = [replace(BASE, name="long", progress=100.0, attained_service=100.0),
             replace(BASE, name="short", progress=100.0, attained_service=400.0),
             replace(BASE, name="new", progress=0.0, attained_service=0.0)]
    # GPU-seconds per step: long 1, short 4 (and "new" reads its class's last, 4).
    policy.steps_left = _Known({"long": 900.0, "short": 100.0, "new": 300.0})
    assert [v.name for v in policy.order(views)] == ["short", "long", "new"]
    policy.steps_left = _Known({"long": 900.0, "short": 100.0, "new": math.nan})
    assert [v.name for v in policy.order(views)] == ["short", "long", "new"]
    policy.steps_left = _Known(dict.fromkeys(("long", "short", "new"), math.nan))
    assert [v.name for v in policy.order(views)] == ["new", "long", "short"]
    assert REMAINING_STEPS.name in policy.needs


def test_the_gittins_rank_runs_first_a_job_likely_to_end_soon() -> None:
    assert gittins_rank(np.full(8, 40.0)) == pytest.approx(40.0)  # certain: its value
    # Half end after 1 step, half after 100: mean 50.5, but one step buys a 1/2 chance to end.
    assert gittins_rank(np.array([1.0] * 50 + [100.0] * 50)) == pytest.approx(2.0)
    assert math.isnan(gittins_rank(np.array([1.0, math.nan])))


@pytest.mark.parametrize(("options", "message"), [
    ({"pool_jobs": -1.0}, "option pool_jobs is -1.0"),
    ({"group": "team"}, "option group is 'team'"),
])
def test_bad_survival_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        make_estimator("survival", **options)


def test_bad_remaining_steps_choice_on_the_command_line_is_one_line() -> None:
    trace = "bayes_sched/data/gavel/traces/small_test.trace"
    done = run_cli("simulate", "--trace", trace, "--cluster", "v100:1x4", "--max-jobs", "2",
                   "--no-progress", "--policy", "finish_time_fairness",
                   "--estimator-opt", "survival.rate_margin=-0.5")
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "rate_margin" in done.stderr and "Traceback" not in done.stderr
