"""Beliefs about steps/s: the interface between throughput learners and the policies that read them.

A *cell* is one throughput a scheduler may need: a job type at a scale factor on a GPU type,
alone or sharing each of its GPUs with a job of another type (Gavel's pairs; same scale factor).
What a cluster reports is a :class:`CellObservation` (steps/s measured over some seconds); a
:class:`ThroughputLearner` turns observations into a :class:`ThroughputBelief`, whose one method,
:meth:`ThroughputBelief.predict`, answers a batch of cells with a posterior mean and posterior
draws (a point estimator answers with one draw equal to its mean). Policies read only beliefs;
the known table (the oracle), Gavel's matrix completion, Sia's one-GPU bootstrap and our
Bayesian model are all learners behind this one interface.

Units: steps per second of the whole job (all its GPUs together), as in
:mod:`bayes_sched.throughputs`; 0 means the job cannot run there (out of memory: a report with
``out_of_memory``, which the estimation stage learns, not a rate).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.throughput_estimates import CellPrediction, ThroughputBelief


class ThroughputLearner(Protocol):
    """Fits a belief to what jobs reported."""

    name: str

    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        """The belief given ``observations`` (those with a non-finite or non-positive rate, or
        non-positive seconds, are ignored with a logged reason)."""
        ...

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        """The cells a newly submitted job of ``job_type`` on ``scale_factor`` GPUs should be
        measured in before its belief is used (Gavel: a fraction of its pairs with reference
        jobs; Sia: one GPU of every type); empty for a learner that profiles nothing up front
        (the oracle, or a policy that explores by posterior draws instead)."""
        ...


_BATCH_SIZE = re.compile(r"^(?P<family>.+?) \(batch size (?P<batch>\d+)\)$")


def job_type_features(job_type: str) -> tuple[str, int | None]:
    """What a job type declares at submission: its model family and batch size
    (``"ResNet-50 (batch size 32)"`` -> ``("ResNet-50", 32)``; ``"A3C"`` -> ``("A3C", None)``)."""
    match = _BATCH_SIZE.match(job_type)
    if match is None:
        return job_type, None
    return match["family"], int(match["batch"])


__all__ = ["CellPrediction", "ThroughputBelief", "ThroughputLearner", "job_type_features"]
