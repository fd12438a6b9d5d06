"""Estimators chosen outside the policy: the registry, the world's oracles, the choice rules."""

from __future__ import annotations

from typing import Any

import pytest

from bayes_sched.errors import InputError
from bayes_sched.estimation.choose import (
    Choices,
    choose_estimators,
    policy_estimators,
    resolve_choices,
)
from bayes_sched.estimation.registry import ESTIMATORS, EstimatorRegistry
from bayes_sched.estimation.throughput_stage import ThroughputEstimator
from bayes_sched.sim.oracles import ThroughputOracle, world_oracles
from bayes_sched.throughput_estimates import THROUGHPUT, KnownThroughputs
from bayes_sched.throughputs import load_throughputs

TRUTH = load_throughputs("simulation")


def test_learners_are_throughput_estimators_with_stage_options() -> None:
    learners = {"uniform", "per_cell", "bayes", "gavel", "sia"}
    assert learners <= set(ESTIMATORS)
    assert all(ESTIMATORS.serves(name) == ("throughput",) for name in learners)
    options = ESTIMATORS.options("per_cell")
    assert {"observation_sd", "refit_interval", "refit_growth"} <= set(options)
    made = ESTIMATORS.make("per_cell", refit_interval=60.0, refit_growth=1.5,
                           observation_sd=0.2)
    assert isinstance(made, ThroughputEstimator)
    assert (made.min_refit_interval, made.refit_growth) == (60.0, 1.5)
    assert made.learner.observation_sd == 0.2  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="refit_growth is 'fast': expected float"):
        ESTIMATORS.make("per_cell", refit_growth="fast")


def test_oracle_publishes_the_world_truth_labelled_oracle() -> None:
    oracles = world_oracles(TRUTH)
    (oracle,) = choose_estimators(("throughput",), None, {"throughput": "oracle"}, oracles)
    assert isinstance(oracle, ThroughputOracle)
    (entry,) = oracle.published()
    assert entry.need == THROUGHPUT and entry.estimator == "oracle" and entry.value is TRUTH
    assert isinstance(entry.value, KnownThroughputs)
    (other,) = choose_estimators(("throughput",), {"oracle": {"table": "tacc"}}, {}, oracles)
    assert other.published()[0].value is load_throughputs("tacc")
    # A learner's stage is not a known table: the policy takes the learned path.
    (learned,) = choose_estimators(("throughput",), {"throughput": "per_cell"}, {}, oracles)
    assert not isinstance(learned.published()[0].value, KnownThroughputs)


def test_choices_by_need_by_name_and_defaults() -> None:
    registries = [world_oracles(TRUTH), ESTIMATORS]
    needs = ("throughput",)
    assert resolve_choices(needs, None, {"throughput": "oracle"}, registries) == {
        "throughput": ("oracle", {})}
    assert resolve_choices(needs, {"bayes": {"refit_growth": 1.0}}, {"throughput": "oracle"},
                           registries) == {"throughput": ("bayes", {"refit_growth": 1.0})}
    assert resolve_choices(needs, {"throughput": {"name": "gavel", "rank": 4}}, {},
                           registries) == {"throughput": ("gavel", {"rank": 4})}
    assert resolve_choices((), None, {}, registries) == {}
    (gavel,) = choose_estimators(needs, {"throughput": "gavel"}, seed=7)
    assert gavel.learner.seed == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(("choices", "message"), [
    ({"nope": {}}, "unknown estimator 'nope': expected one of oracle, oracle_stage, uniform"),
    ({"job_goodput": "bayes"}, "need 'job_goodput': the policy reads throughput"),
    ({"throughput": "nope"}, "unknown estimator 'nope'"),
    ({"bayes": {}, "per_cell": {}}, "estimators bayes, per_cell all serve 'throughput'"),
    ({"throughput": "per_cell", "bayes": {}}, "estimator 'bayes' serves throughput: the policy"),
    ({"bayes": "fast"}, "estimator 'bayes': expected a table of options"),
])
def test_bad_choices_are_one_line_errors(choices: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        choose_estimators(("throughput",), choices, {}, world_oracles(TRUTH))
    assert "\n" not in str(caught.value)



def test_the_table_world_policies_carry_no_estimation_option() -> None:
    from bayes_sched.policies import POLICIES
    from bayes_sched.worlds import TABLE_WORLD_POLICIES

    estimation = {"source", "thompson", "refit_interval", "refit_growth", "throughputs"}
    for name in TABLE_WORLD_POLICIES:
        assert not estimation & set(POLICIES.options(name)), name
    # Which estimator serves a need is plain data beside the policy, not an option of it.
    gavel, sia = POLICIES["max_min_fairness_packed"], POLICIES["sia"]
    assert gavel.default_estimators == sia.default_estimators == {"throughput": "oracle"}


def test_the_remaining_policies_state_their_estimators_as_data() -> None:
    from bayes_sched.estimation.job_models import JobModelEstimator
    from bayes_sched.estimation.remaining_work import (
        DirichletRegimePredictor,
        RemainingWorkEstimator,
    )
    from bayes_sched.interference.colocation import ColocationLearning
    from bayes_sched.interference.pairs import PairResiduals
    from bayes_sched.policies import make_policy

    def made(policy: str, choices: Choices | None = None,
             oracles: EstimatorRegistry | None = None, **options: object) -> list[Any]:
        return policy_estimators(make_policy(policy, **options), choices, oracles)

    assert made("fifo") == [] and made("tiresias") == []
    (point,) = made("pollux")
    assert isinstance(point, JobModelEstimator) and point.posterior is None
    (drawn,) = made("pollux", {"job_posterior": {"num_samples": 8}}, risk=0.1)
    assert drawn.posterior is not None and drawn.posterior.num_samples == 8
    assert drawn.name == "job_posterior"
    models, learning = made("bo", {"bo_colocation": {"posterior_draws": 16}})
    assert isinstance(models, JobModelEstimator) and isinstance(learning, ColocationLearning)
    assert learning.predictor(PairResiduals).num_draws == 16
    with pytest.raises(InputError, match="posterior_draws is 0"):
        made("bo", {"bo_colocation": {"posterior_draws": 0}})
    for policy in ("optimus", "sia_adaptive"):
        assert [e.name for e in made(policy)] == ["job_models"]
    oracles = world_oracles(load_throughputs("tacc"))
    throughput, remaining = made("shockwave", None, oracles)
    assert isinstance(throughput, ThroughputOracle)
    assert isinstance(remaining, RemainingWorkEstimator)
    assert isinstance(remaining.predictor, DirichletRegimePredictor)
    with pytest.raises(InputError, match="policy reads job_goodput"):
        made("pollux", {"remaining_work": "dirichlet"})
