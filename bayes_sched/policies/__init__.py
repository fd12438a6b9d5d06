"""Scheduling policies: each a small module against :mod:`bayes_sched.policies.base`, registered by
name in :data:`POLICIES` with typed options (the constructor's keyword arguments)."""

from __future__ import annotations

from typing import Any

from bayes_sched.policies.base import Policy
from bayes_sched.policies.bo import BayesOptPolicy
from bayes_sched.policies.fifo import FifoPolicy
from bayes_sched.policies.optimus import OptimusPolicy
from bayes_sched.policies.pollux import PolluxPolicy
from bayes_sched.policies.tiresias import TiresiasPolicy
from bayes_sched.registry import Registry

#: Policy name -> factory of a fresh policy (policies keep state across rounds); a read-only
#: mapping whose :meth:`~bayes_sched.registry.Registry.options` lists each policy's typed options.
POLICIES: Registry[Policy] = Registry("policy")
POLICIES.register("pollux", PolluxPolicy)
POLICIES.register("tiresias", TiresiasPolicy)
POLICIES.register("optimus", OptimusPolicy)
POLICIES.register("fifo", FifoPolicy)
POLICIES.register("bo", BayesOptPolicy)


def make_policy(name: str, /, **options: Any) -> Policy:
    """A fresh policy by name with typed options, e.g. ``make_policy("pollux", p=-0.5)``.

    Raises:
        InputError: an unknown policy, an option it does not take, or a value of the wrong type
            (one line naming the option and the expected type).
    """
    return POLICIES.make(name, **options)


__all__ = ["POLICIES", "BayesOptPolicy", "FifoPolicy", "OptimusPolicy", "PolluxPolicy", "Policy",
           "TiresiasPolicy", "make_policy"]
