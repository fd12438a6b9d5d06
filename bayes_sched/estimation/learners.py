"""Throughput learners by name: the sources a time-sharing policy may read instead of the table.

:data:`LEARNERS` maps a name to a factory of a fresh
:class:`~bayes_sched.estimation.throughput_cells.ThroughputLearner` with typed options (the
factory's keyword arguments, as for policies). :func:`make_learner` passes what the caller knows:
``table`` (the measured throughputs the jobs run at: what the oracle knows) and ``seed``, to the
factories that take them. A new learner is one :meth:`~bayes_sched.registry.Registry.register`
line here.
"""

from __future__ import annotations

from typing import Any

from bayes_sched.estimation.throughput_cells import ThroughputLearner
from bayes_sched.registry import Registry
from bayes_sched.throughputs import ThroughputTable

LEARNERS: Registry[ThroughputLearner] = Registry("throughput learner")
LEARNERS.register("oracle", "bayes_sched.estimation.cell_learners:OracleLearner",
                  "the measured table, whatever the jobs report (the upper bound)")
LEARNERS.register("uniform", "bayes_sched.estimation.cell_learners:UniformLearner",
                  "no estimation: one steps/s everywhere, nothing packed")
LEARNERS.register("per_cell", "bayes_sched.estimation.cell_learners:PerCellLearner",
                  "independent log-normal posterior per cell, broad prior (no pooling)")
LEARNERS.register("bayes", "bayes_sched.estimation.throughput.bayesian:BayesianThroughputLearner",
                  "ours: one GP over alone and paired log steps/s, prior from job features")
LEARNERS.register("gavel", "bayes_sched.estimation.throughput.gavel_pmf:"
                  "GavelMatrixCompletionLearner",
                  "Gavel's estimator: profile 20% of reference pairs, rank-10 matrix completion, "
                  "nearest reference type")
LEARNERS.register("sia", "bayes_sched.estimation.throughput.sia_bootstrap:SiaBootstrapLearner",
                  "Sia's bootstrap: one GPU of every type, multi-GPU by the one-GPU ratio")


def make_learner(name: str, /, table: ThroughputTable, seed: int = 0, where: str = "",
                 **options: Any) -> ThroughputLearner:
    """A fresh learner by name with typed ``options``; ``table`` and ``seed`` go to the factories
    that take them.

    Raises:
        InputError: an unknown learner, an option it does not take or of the wrong type.
    """
    return LEARNERS.make(name, where=where, context={"table": table, "seed": seed}, **options)
