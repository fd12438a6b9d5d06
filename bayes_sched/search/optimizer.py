"""The search loop: try the model's favourite first, then whatever maximises Log Expected
Improvement, until the expected improvement is small relative to the best seen or the budget ends.

The objective is a utility in log units, ``log goodput - cost_weight * log GPUs``: ``cost_weight=0``
asks for the most goodput, ``1`` for the least GPU-time per unit of progress. In log units an
expected improvement of 0.01 is an expected 1% gain over the best configuration seen, which is what
the stopping rule compares with ``stop_improvement``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from botorch.acquisition import LogExpectedImprovement

from bayes_sched.search.candidates import CandidateSet, Configuration
from bayes_sched.search.surrogate import fit_surrogate
from bayes_sched.search.trials import TrialError, TrialRunner

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trial:
    """One trial: the configuration, its measured goodput (``None`` if it failed), what the
    surrogate predicted for its utility beforehand (mean and standard deviation, log units), the
    log EI that chose it (``nan`` for the first, model-chosen, trial) and the error if it failed."""

    config: Configuration
    goodput: float | None
    predicted_mean: float
    predicted_std: float
    log_ei: float
    error: str = ""


@dataclass
class SearchResult:
    """Every trial in order, why the search stopped, and surrogate fits that did not converge."""

    trials: list[Trial] = field(default_factory=list)
    stop_reason: str = ""
    fit_problems: list[str] = field(default_factory=list)
    cost_weight: float = 0.0

    def utility(self, trial: Trial) -> float:
        assert trial.goodput is not None
        return math.log(trial.goodput) - self.cost_weight * math.log(trial.config.num_gpus)

    @property
    def finished(self) -> list[Trial]:
        return [t for t in self.trials if t.goodput is not None]

    @property
    def best(self) -> Configuration | None:
        """The configuration with the best measured utility (``None`` if every trial failed)."""
        done = self.finished
        return max(done, key=self.utility).config if done else None


def search_configuration(candidates: CandidateSet, prior: np.ndarray, runner: TrialRunner,
                         max_trials: int = 20, min_trials: int = 4,
                         stop_improvement: float = 0.01, cost_weight: float = 0.0,
                         noise: float = 0.02, seed: int = 0) -> SearchResult:
    """Bayesian optimisation of one job's configuration.

    Args:
        candidates: the configurations to choose among.
        prior: predicted log goodput per candidate, shape ``(C,)`` (see
            :func:`~bayes_sched.search.prior.model_prior`).
        runner: runs trials.
        max_trials: trial budget (failed trials count).
        min_trials: finished trials before the stopping rule may fire.
        stop_improvement: stop when the best log EI is below ``log(stop_improvement)``, i.e. the
            expected gain is below this fraction of the best seen.
        cost_weight: utility is ``log goodput - cost_weight * log GPUs``.
        noise: relative measurement noise of a trial.
        seed: seeds the fit's restarts and tie-breaks.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    gpus = candidates.column("num_gpus").astype(np.float64)
    prior_utility = np.asarray(prior, dtype=np.float64) - cost_weight * np.log(gpus)
    features = candidates.features
    result = SearchResult(cost_weight=cost_weight)
    open_ = np.ones(len(candidates), dtype=bool)  # not yet tried
    x_all = torch.as_tensor(features, dtype=torch.float64).unsqueeze(1)   # (C, 1, D)
    while len(result.trials) < max_trials and open_.any():
        done = [(i, t) for i, t in zip(_indices(result, candidates), result.trials,
                                       strict=True) if t.goodput is not None]
        if not done:
            # The model's own choice first (ties broken at random), or after failures the next.
            scores = np.where(open_, prior_utility, -np.inf)
            best = np.flatnonzero(scores == scores.max())
            choice = int(rng.choice(best))
            mean, std, log_ei = float(prior_utility[choice]), float("nan"), float("nan")
        else:
            index = np.array([i for i, _ in done])
            y = np.array([result.utility(t) for _, t in done])
            # The GP models utility; its prior mean is the model's utility.
            model, status = fit_surrogate(features[index], y, features, prior_utility, noise)
            if not status.converged:
                result.fit_problems.append(status.message)
                LOG.warning("surrogate fit did not converge: %s", status.message)
            with torch.no_grad():
                acquisition = LogExpectedImprovement(model, best_f=float(y.max()))
                log_ei_all = acquisition(x_all).numpy()
                posterior = model.posterior(x_all.squeeze(1))
                means = posterior.mean.squeeze(-1).numpy()
                stds = posterior.variance.clamp_min(0).sqrt().squeeze(-1).numpy()
            log_ei_all = np.where(open_, log_ei_all, -np.inf)
            choice = int(np.argmax(log_ei_all))
            log_ei = float(log_ei_all[choice])
            if len(done) >= min_trials and log_ei < math.log(stop_improvement):
                result.stop_reason = (f"expected improvement {math.exp(log_ei):.2%} of the best "
                                      f"seen is below {stop_improvement:.2%}")
                break
            mean, std = float(means[choice]), float(stds[choice])
        open_[choice] = False
        config = candidates.configs[choice]
        try:
            goodput = float(runner.run(config))
            if not math.isfinite(goodput) or goodput <= 0:
                raise TrialError(f"trial of {config} measured goodput {goodput}: expected > 0")
            result.trials.append(Trial(config, goodput, mean, std, log_ei))
        except TrialError as error:
            LOG.warning("%s; continuing without it", error)
            result.trials.append(Trial(config, None, mean, std, log_ei, str(error)))
    if not result.stop_reason:
        result.stop_reason = ("trial budget spent" if len(result.trials) >= max_trials
                              else "every candidate tried")
    if not result.finished:
        result.stop_reason += "; every trial failed, no configuration to recommend"
    return result


def _indices(result: SearchResult, candidates: CandidateSet) -> list[int]:
    lookup = {c: i for i, c in enumerate(candidates.configs)}
    return [lookup[t.config] for t in result.trials]
