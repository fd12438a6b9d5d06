"""Scheduling policies: each a small module against :mod:`bayes_sched.policies.base`, registered by
name in :data:`POLICIES` with typed options (the constructor's keyword arguments).

The policy classes are imported on first use (a registry entry names its class by path, and module
``__getattr__`` serves the class names), so listing the policy names (``bayes-sched simulate
--help``) does not load torch, BoTorch or the search code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bayes_sched.registry import Registry

if TYPE_CHECKING:
    from bayes_sched.policies.allox import AlloXPolicy
    from bayes_sched.policies.astraea import AstraeaPolicy
    from bayes_sched.policies.base import Policy
    from bayes_sched.policies.bo import BayesOptPolicy
    from bayes_sched.policies.elas import ElasPolicy
    from bayes_sched.policies.fifo import FifoPolicy
    from bayes_sched.policies.gandiva import GandivaPolicy
    from bayes_sched.policies.gandiva_fair import GandivaFairPolicy
    from bayes_sched.policies.gandiva_fair_tenants import GandivaFairTenantPolicy
    from bayes_sched.policies.gavel.fifo import FifoPackedPolicy, FifoPerfPolicy, GavelFifoPolicy
    from bayes_sched.policies.gavel.finish_time_fairness import (
        FinishTimeFairnessPackedPolicy,
        FinishTimeFairnessPerfPolicy,
        FinishTimeFairnessPolicy,
    )
    from bayes_sched.policies.gavel.max_min_fairness import (
        MaxMinFairnessPackedPolicy,
        MaxMinFairnessPerfPolicy,
        MaxMinFairnessPolicy,
    )
    from bayes_sched.policies.gavel.max_sum_throughput import MaxSumThroughputPerfPolicy
    from bayes_sched.policies.gavel.min_total_duration import (
        MinTotalDurationPackedPolicy,
        MinTotalDurationPolicy,
    )
    from bayes_sched.policies.optimus import OptimusPolicy
    from bayes_sched.policies.pollux import PolluxPolicy
    from bayes_sched.policies.shockwave import ShockwavePolicy
    from bayes_sched.policies.sia import SiaPolicy
    from bayes_sched.policies.themis import ThemisPolicy
    from bayes_sched.policies.tiresias import TiresiasPolicy

#: Exported name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "Policy": "bayes_sched.policies.base",
    "BayesOptPolicy": "bayes_sched.policies.bo",
    "FifoPolicy": "bayes_sched.policies.fifo",
    "MaxMinFairnessPolicy": "bayes_sched.policies.gavel.max_min_fairness",
    "MaxMinFairnessPerfPolicy": "bayes_sched.policies.gavel.max_min_fairness",
    "MaxSumThroughputPerfPolicy": "bayes_sched.policies.gavel.max_sum_throughput",
    "MaxMinFairnessPackedPolicy": "bayes_sched.policies.gavel.max_min_fairness",
    "FinishTimeFairnessPolicy": "bayes_sched.policies.gavel.finish_time_fairness",
    "AlloXPolicy": "bayes_sched.policies.allox",
    "GandivaPolicy": "bayes_sched.policies.gandiva",
    "GandivaFairPolicy": "bayes_sched.policies.gandiva_fair",
    "ElasPolicy": "bayes_sched.policies.elas",
    "FinishTimeFairnessPerfPolicy": "bayes_sched.policies.gavel.finish_time_fairness",
    "FinishTimeFairnessPackedPolicy": "bayes_sched.policies.gavel.finish_time_fairness",
    "MinTotalDurationPolicy": "bayes_sched.policies.gavel.min_total_duration",
    "MinTotalDurationPackedPolicy": "bayes_sched.policies.gavel.min_total_duration",
    "GavelFifoPolicy": "bayes_sched.policies.gavel.fifo",
    "FifoPerfPolicy": "bayes_sched.policies.gavel.fifo",
    "FifoPackedPolicy": "bayes_sched.policies.gavel.fifo",
    "OptimusPolicy": "bayes_sched.policies.optimus",
    "PolluxPolicy": "bayes_sched.policies.pollux",
    "ShockwavePolicy": "bayes_sched.policies.shockwave",
    "SiaPolicy": "bayes_sched.policies.sia",
    "SiaAdaptivePolicy": "bayes_sched.policies.sia_adaptive",
    "TiresiasPolicy": "bayes_sched.policies.tiresias",
    "AstraeaPolicy": "bayes_sched.policies.astraea",
    "GandivaFairTenantPolicy": "bayes_sched.policies.gandiva_fair_tenants",
    "ThemisPolicy": "bayes_sched.policies.themis",
}

#: Policy name -> factory of a fresh policy (policies keep state across rounds); a read-only
#: mapping whose :meth:`~bayes_sched.registry.Registry.options` lists each policy's typed options.
POLICIES: Registry[Policy] = Registry("policy", group="bayes_sched.policies")
for _name, _class in (("pollux", "PolluxPolicy"), ("tiresias", "TiresiasPolicy"),
                      ("optimus", "OptimusPolicy"), ("fifo", "FifoPolicy"),
                      ("bo", "BayesOptPolicy"), ("max_min_fairness", "MaxMinFairnessPolicy"),
                      ("max_min_fairness_perf", "MaxMinFairnessPerfPolicy"),
                      ("max_sum_throughput_perf", "MaxSumThroughputPerfPolicy"),
                      ("max_min_fairness_packed", "MaxMinFairnessPackedPolicy"),
                      ("finish_time_fairness", "FinishTimeFairnessPolicy"),
                      ("finish_time_fairness_perf", "FinishTimeFairnessPerfPolicy"),
                      ("finish_time_fairness_packed", "FinishTimeFairnessPackedPolicy"),
                      ("min_total_duration", "MinTotalDurationPolicy"),
                      ("min_total_duration_packed", "MinTotalDurationPackedPolicy"),
                      ("gavel_fifo", "GavelFifoPolicy"), ("fifo_perf", "FifoPerfPolicy"),
                      ("fifo_packed", "FifoPackedPolicy"), ("allox", "AlloXPolicy"),
                      ("gandiva", "GandivaPolicy"), ("gandiva_fair", "GandivaFairPolicy"),
                      ("elas", "ElasPolicy"), ("shockwave", "ShockwavePolicy"),
                      ("sia", "SiaPolicy"), ("sia_adaptive", "SiaAdaptivePolicy")):
    POLICIES.register(_name, f"{_EXPORTS[_class]}:{_class}")
POLICIES.register("astraea", f"{_EXPORTS['AstraeaPolicy']}:AstraeaPolicy")
POLICIES.register("gandiva_fair_tenant",
                  f"{_EXPORTS['GandivaFairTenantPolicy']}:GandivaFairTenantPolicy")
POLICIES.register("themis", f"{_EXPORTS['ThemisPolicy']}:ThemisPolicy")
POLICIES.register("pollux_tenants", "bayes_sched.policies.pollux_tenants:PolluxTenantPolicy")
POLICIES.register("harmony", "bayes_sched.policies.harmony:HarmonyPolicy")
POLICIES.register("banerjee", "bayes_sched.policies.banerjee:BanerjeePolicy")
POLICIES.register("metis", "bayes_sched.policies.metis:MetisPolicy")
POLICIES.register("srtf", "bayes_sched.policies.srtf:SrtfPolicy")


def make_policy(name: str, /, **options: Any) -> Policy:
    """A fresh policy by name with typed options, e.g. ``make_policy("pollux", p=-0.5)``.

    Raises:
        InputError: an unknown policy, an option it does not take, or a value of the wrong type
            (one line naming the option and the expected type).
    """
    return POLICIES.make(name, **options)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["POLICIES", "make_policy",
           "AlloXPolicy", "AstraeaPolicy", "BayesOptPolicy", "ElasPolicy", "GandivaFairPolicy",
           "GandivaFairTenantPolicy", "GandivaPolicy",
           "FifoPackedPolicy", "FifoPerfPolicy",
           "FifoPolicy", "FinishTimeFairnessPackedPolicy",
           "FinishTimeFairnessPerfPolicy", "FinishTimeFairnessPolicy",
           "GavelFifoPolicy", "MaxMinFairnessPackedPolicy", "MaxMinFairnessPerfPolicy",
           "MaxMinFairnessPolicy", "MaxSumThroughputPerfPolicy",
           "MinTotalDurationPackedPolicy", "MinTotalDurationPolicy", "OptimusPolicy",
           "Policy", "PolluxPolicy", "ShockwavePolicy", "SiaAdaptivePolicy", "SiaPolicy",
           "ThemisPolicy", "TiresiasPolicy"]
