"""Uncertainty-aware performance models of deep-learning training jobs.

Throughput (Pollux's step-time model, point and Bayesian fits), statistical efficiency from the
gradient noise scale, goodput and batch-size tuning, and fit reports. Depends on nothing else in
bayes-sched. The main objects are importable from here (``from perfmodel import
fit_throughput``); they load on first use, so ``import perfmodel`` imports no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the exported names, for type checkers
    from perfmodel.allreduce import Links, gradient_bytes
    from perfmodel.convergence import Convergence, ConvergenceRule
    from perfmodel.datasets import POLLUX_MODELS
    from perfmodel.efficiency import EfficiencyModel
    from perfmodel.errors import FitError, InputError, UnreliableFitWarning
    from perfmodel.goodput import GoodputModel
    from perfmodel.profiles import (
        GradientTrace,
        StepTimeProfile,
        load_pollux_gradients,
        load_pollux_profile,
        read_gradient_traces,
        read_step_time_profile,
    )
    from perfmodel.report import (
        ModelFit,
        fit_model,
        write_model_report,
    )
    from perfmodel.sync_prior import LinkSlowdown, physics_prior
    from perfmodel.throughput import (
        ThroughputParams,
        fit_throughput,
        predict_throughput,
    )
    from perfmodel.throughput_bayes.fit import fit_throughput_posterior
    from perfmodel.throughput_bayes.posterior import ThroughputPosterior
    from perfmodel.throughput_bayes.prior import StepTimePrior

#: Public name -> module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "StepTimeProfile": "perfmodel.profiles",
    "GradientTrace": "perfmodel.profiles",
    "load_pollux_profile": "perfmodel.profiles",
    "load_pollux_gradients": "perfmodel.profiles",
    "read_step_time_profile": "perfmodel.profiles",
    "read_gradient_traces": "perfmodel.profiles",
    "ThroughputParams": "perfmodel.throughput",
    "fit_throughput": "perfmodel.throughput",
    "predict_throughput": "perfmodel.throughput",
    "ThroughputPosterior": "perfmodel.throughput_bayes.posterior",
    "StepTimePrior": "perfmodel.throughput_bayes.prior",
    "fit_throughput_posterior": "perfmodel.throughput_bayes.fit",
    "Links": "perfmodel.allreduce",
    "gradient_bytes": "perfmodel.allreduce",
    "LinkSlowdown": "perfmodel.sync_prior",
    "physics_prior": "perfmodel.sync_prior",
    "EfficiencyModel": "perfmodel.efficiency",
    "GoodputModel": "perfmodel.goodput",
    "ModelFit": "perfmodel.report",
    "fit_model": "perfmodel.report",
    "write_model_report": "perfmodel.report",
    "POLLUX_MODELS": "perfmodel.datasets",
    "InputError": "perfmodel.errors",
    "FitError": "perfmodel.errors",
    "UnreliableFitWarning": "perfmodel.errors",
    "Convergence": "perfmodel.convergence",
    "ConvergenceRule": "perfmodel.convergence",
}


def __getattr__(name: str) -> Any:
    # The main objects, imported on first use so that importing the package stays light.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "StepTimeProfile",
    "GradientTrace",
    "load_pollux_profile",
    "load_pollux_gradients",
    "read_step_time_profile",
    "read_gradient_traces",
    "ThroughputParams",
    "fit_throughput",
    "predict_throughput",
    "ThroughputPosterior",
    "StepTimePrior",
    "fit_throughput_posterior",
    "Links",
    "gradient_bytes",
    "LinkSlowdown",
    "physics_prior",
    "EfficiencyModel",
    "GoodputModel",
    "ModelFit",
    "fit_model",
    "write_model_report",
    "POLLUX_MODELS",
    "InputError",
    "FitError",
    "UnreliableFitWarning",
    "Convergence",
    "ConvergenceRule",
]
