"""Trials and priors in the simulator's physics, for the configuration search
(:mod:`bayes_sched.search`): a :class:`~bayes_sched.search.trials.TrialRunner` that runs a shipped
application's true step times and gradient statistics with seeded measurement noise, optional
failures and a time limit, and the goodput model such a job would know of itself before any trial.
"""

from __future__ import annotations

import numpy as np

from bayes_sched.search.candidates import CandidateSet, Configuration, enumerate_candidates
from bayes_sched.search.trials import TrialError
from bayes_sched.sim.physics import get_application
from perfmodel.datasets import pollux_model_dir
from perfmodel.goodput import GoodputModel
from perfmodel.profiles import read_placements_csv
from perfmodel.throughput import fit_throughput, seconds_per_step


class PhysicsTrialRunner:
    """Trials in the simulator's physics for one shipped application.

    Args:
        application: a shipped model (``"cifar10"``, ...).
        num_nodes, gpus_per_node: the cluster the job may use.
        max_gpus: most GPUs the job may get (default: the whole cluster).
        epoch_fraction: how far through training the job is (sets its gradient noise).
        noise: relative standard deviation of a measurement (log-normal).
        failure_rate: probability that a trial fails (to exercise recovery).
        trial_steps: optimiser steps one trial measures.
        timeout: seconds a trial may take (steps plus ``startup`` seconds), else it times out.
        seed: seeds the noise and failures.
    """

    def __init__(self, application: str, num_nodes: int = 8, gpus_per_node: int = 4,
                 max_gpus: int | None = None, epoch_fraction: float = 0.25, noise: float = 0.02,
                 failure_rate: float = 0.0, trial_steps: int = 50, startup: float = 30.0,
                 timeout: float = float("inf"), seed: int = 0) -> None:
        self.app = get_application(application)
        self.num_nodes, self.gpus_per_node = num_nodes, gpus_per_node
        self.max_gpus = max_gpus
        self.epoch = int(epoch_fraction * (self.app.max_epochs - 1))
        self.noise, self.failure_rate = noise, failure_rate
        self.trial_steps, self.startup, self.timeout = trial_steps, startup, timeout
        self.rng = np.random.default_rng(seed)
        self.trial_seconds = 0.0  # simulated seconds spent in trials so far

    def candidates(self, **kwargs: object) -> CandidateSet:
        """The application's candidate configurations on this cluster."""
        return enumerate_candidates(self.app.limits, self.num_nodes, self.gpus_per_node,
                                    self.max_gpus, **kwargs)  # type: ignore[arg-type]

    def seconds_per_step(self, config: Configuration) -> float:
        step, sync = self.app.step_time(config.placement, config.local_bsz)
        return seconds_per_step(step, sync, config.accum_steps)

    def true_goodput(self, config: Configuration) -> float:
        """Noise-free goodput, examples at the initial batch size per second."""
        gain = self.app.gain(config.batch_size, self.epoch)
        return gain * self.app.limits.init_batch_size / self.seconds_per_step(config)

    def run(self, config: Configuration) -> float:
        seconds = self.startup + self.trial_steps * self.seconds_per_step(config)
        if seconds > self.timeout:
            self.trial_seconds += self.timeout
            raise TrialError(f"trial of {config} timed out after {self.timeout:g} s "
                             f"(needs {seconds:.0f} s)")
        self.trial_seconds += seconds
        if self.rng.random() < self.failure_rate:
            raise TrialError(f"trial of {config} failed (simulated job crash)")
        return self.true_goodput(config) * float(np.exp(self.noise * self.rng.standard_normal()))


def profiled_goodput_model(application: str, epoch: int) -> GoodputModel:
    """A shipped application's goodput model fitted on its single-node profile, with the gradient
    noise it measures at ``epoch`` at its initial batch size."""
    app = get_application(application)
    profile = read_placements_csv(pollux_model_dir(application) / "placements.csv", application)
    params = fit_throughput(profile.subset(profile.num_nodes == 1))
    sqr, var = app.grad_stats(app.limits.init_batch_size, epoch)
    return GoodputModel(params, sqr, var, app.limits.init_batch_size)
