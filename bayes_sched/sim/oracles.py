"""The truth a simulated world supplies to the estimation stage: its ``oracle`` estimators.

Truth reaches a decision only through an estimator labelled ``oracle`` in the round's
:class:`~bayes_sched.estimates.Estimates`. A throughput-table world knows the measured table its
jobs run at; :func:`world_oracles` offers it as

* ``oracle``: :class:`ThroughputOracle`, publishing the table itself as
  :class:`~bayes_sched.throughput_estimates.KnownThroughputs` (a policy reads it exactly as it
  would read the table: Gavel's own rule);
* ``oracle_stage``: the table as a learner behind the loop's throughput estimator
  (:class:`~bayes_sched.estimation.cell_learners.OracleLearner`): the table's rates whatever
  the jobs report, where jobs fit learned from failed launches as a learner's policy learns it
  (the upper bound of the learners, compared on their path).

Which table the oracle knows is the world's truth (the table its cluster runs on), or the
oracle's ``table`` option naming another shipped table (Gavel's ``"simulation"`` or
``"physical"``, Shockwave's ``"tacc"``).

A world whose jobs change their batch size (Shockwave's) also knows each job's true remaining
work; it offers it as

* ``oracle_remaining_work``: :class:`~bayes_sched.estimation.remaining_work.OracleRemainingWork`
  for the ``remaining_work`` need, labelled ``oracle`` (the upper bound of the predictors).

A world whose jobs declare their steps knows where each really stops (a cancelled or failed job
stops before its declaration); it offers it as

* ``oracle_remaining_steps``:
  :class:`~bayes_sched.estimation.remaining_steps.OracleRemainingSteps` for the
  ``remaining_steps`` need, labelled ``oracle`` (the upper bound of ``declared``, ``ignored`` and
  ``survival``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from bayes_sched.estimates import Estimates
from bayes_sched.estimation import Estimator
from bayes_sched.estimation.cell_learners import OracleLearner
from bayes_sched.estimation.constant import ConstantEstimator
from bayes_sched.estimation.registry import EstimatorRegistry, RefitGrowth, RefitInterval
from bayes_sched.estimation.remaining_steps import OracleRemainingSteps, RemainingStepsEstimator
from bayes_sched.estimation.remaining_work import OracleRemainingWork, RemainingWorkEstimator
from bayes_sched.estimation.throughput_stage import REFIT_GROWTH, ThroughputEstimator
from bayes_sched.remaining_work import REMAINING_STEPS
from bayes_sched.throughput_estimates import THROUGHPUT, ThroughputEstimate
from bayes_sched.throughputs import ThroughputTable, load_throughputs

#: The shipped tables an oracle may be told to know instead of its world's.
TableName = Literal["simulation", "physical", "tacc"]


class ThroughputOracle(ConstantEstimator[ThroughputEstimate]):
    """Publishes a measured table for the ``throughput`` need, labelled ``oracle`` (an
    estimator that learns nothing).

    Args:
        table: the steps/s the world's jobs run at.
    """

    def __init__(self, table: ThroughputTable) -> None:
        super().__init__(THROUGHPUT, "oracle", table)
        self.table = table


def oracle_estimates(table: ThroughputTable) -> Estimates:
    """The bundle of a round whose only estimate is ``table`` from the oracle (a policy deciding
    outside the loop on the truth, as a test or a decision benchmark does)."""
    return Estimates(ThroughputOracle(table).published())


def world_oracles(truth: ThroughputTable,
                  remaining_seconds: Callable[[str], float] | None = None,
                  remaining_steps: Callable[[str], float] | None = None) -> EstimatorRegistry:
    """The oracles of a throughput-table world whose jobs run at ``truth``: ``oracle`` and
    ``oracle_stage`` (see the module), each with a ``table`` option naming another shipped
    table (default: ``truth``); with ``remaining_seconds`` (job name -> seconds of training it
    truly has left alone on its GPUs), ``oracle_remaining_work`` too; with ``remaining_steps``
    (job name -> steps it truly has left before it stops), ``oracle_remaining_steps``."""

    def oracle(table: TableName | None = None) -> Estimator:
        """the measured table the world's jobs run at, read as it is (Gavel's rule)"""
        return ThroughputOracle(truth if table is None else load_throughputs(table))

    def oracle_stage(table: TableName | None = None, refit_interval: RefitInterval = 0.0,
                     refit_growth: RefitGrowth = REFIT_GROWTH) -> Estimator:
        """the measured table as a learner: where jobs fit learned from failed launches"""
        known = truth if table is None else load_throughputs(table)
        return ThroughputEstimator(OracleLearner(known), refit_interval, refit_growth)

    registry = EstimatorRegistry("oracle")
    registry.register("oracle", oracle, serves=("throughput",))
    registry.register("oracle_stage", oracle_stage, serves=("throughput",))
    if remaining_seconds is not None:
        truly_left = remaining_seconds

        def oracle_remaining_work(whole_epochs: bool = False) -> Estimator:
            """each job's true remaining work (``whole_epochs``: the profiles beside it)"""
            return RemainingWorkEstimator(OracleRemainingWork(truly_left, whole_epochs),
                                          "oracle")

        registry.register("oracle_remaining_work", oracle_remaining_work,
                          serves=("remaining_work",))
    if remaining_steps is not None:
        steps_left = remaining_steps

        def oracle_remaining_steps() -> Estimator:
            """each job's true remaining steps (where it really stops)"""
            return RemainingStepsEstimator(REMAINING_STEPS, "oracle",
                                           OracleRemainingSteps(steps_left))

        registry.register("oracle_remaining_steps", oracle_remaining_steps,
                          serves=("remaining_steps",))
    return registry


__all__ = ["TableName", "ThroughputOracle", "oracle_estimates", "world_oracles"]
