"""Throughput cells: the throughputs a scheduler may need, and what a job reports about them.

A *cell* is one throughput: a job type at a scale factor on a GPU type, alone or sharing each of
its GPUs with a job of another type (Gavel's pairs; same scale factor). A job reports
:class:`CellObservation` s (:attr:`bayes_sched.jobs.JobView.cell_observations`); the estimation
stage turns them into beliefs (:mod:`bayes_sched.estimation.throughput_cells`).

Units: steps per second of the whole job (all its GPUs together), as in
:mod:`bayes_sched.throughputs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Cell(NamedTuple):
    """One throughput: ``job_type`` on ``scale_factor`` GPUs of ``gpu_type``, alone
    (``partner`` is ``None``) or sharing each GPU with a job of type ``partner``.

    A named tuple (immutable, hashed and compared in C) rather than a frozen dataclass: cells key
    every dictionary of the estimation stage and its learners, ~200,000 lookups a short online
    run, where the dataclass's Python ``__hash__`` and ``__eq__`` were a tenth of ours' decision
    time."""

    job_type: str
    scale_factor: int
    gpu_type: str
    partner: str | None = None


@dataclass(frozen=True)
class CellObservation:
    """What a job reported: ``steps_per_second`` in ``cell``, measured over ``seconds`` of
    running, ending at ``time`` (seconds since the start of the workload). With
    ``out_of_memory`` the job failed to launch there (it does not fit in the GPUs' memory):
    ``steps_per_second`` is 0 and ``seconds`` the time its GPUs were held for nothing."""

    cell: Cell
    steps_per_second: float
    seconds: float
    time: float = 0.0
    out_of_memory: bool = False


__all__ = ["Cell", "CellObservation"]
