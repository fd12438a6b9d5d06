"""Trial runs: a short run of a job in one configuration, returning its measured goodput.

:class:`TrialRunner` is what the search needs from a cluster. The simulator meets it with its
ground-truth physics (:class:`bayes_sched.sim.trials.PhysicsTrialRunner`); a real cluster would
implement the same method by launching the job for a few steps.
"""

from __future__ import annotations

from typing import Protocol

from bayes_sched.search.candidates import Configuration


class TrialError(RuntimeError):
    """A trial that failed or timed out; the search records it and goes on without it."""


class TrialRunner(Protocol):
    def run(self, config: Configuration) -> float:
        """Goodput measured in a short run, examples (at the initial batch size) per second.

        Raises:
            TrialError: the run failed or timed out.
        """
        ...
