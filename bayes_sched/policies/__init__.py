"""Scheduling policies: each a small module against :mod:`bayes_sched.policies.base`."""

from __future__ import annotations

from collections.abc import Callable

from bayes_sched.errors import InputError
from bayes_sched.policies.base import Policy
from bayes_sched.policies.bo import BayesOptPolicy
from bayes_sched.policies.fifo import FifoPolicy
from bayes_sched.policies.optimus import OptimusPolicy
from bayes_sched.policies.pollux import PolluxPolicy
from bayes_sched.policies.tiresias import TiresiasPolicy

#: Policy name -> factory of a fresh policy (policies keep state across rounds).
POLICIES: dict[str, Callable[[], Policy]] = {
    "pollux": PolluxPolicy,
    "tiresias": TiresiasPolicy,
    "optimus": OptimusPolicy,
    "fifo": FifoPolicy,
    "bo": BayesOptPolicy,
}


def make_policy(name: str) -> Policy:
    """A fresh policy by name; raises :class:`InputError` for an unknown one."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise InputError(
            f"unknown policy '{name}': expected one of {', '.join(POLICIES)}") from None


__all__ = ["POLICIES", "BayesOptPolicy", "FifoPolicy", "OptimusPolicy", "PolluxPolicy", "Policy",
           "TiresiasPolicy", "make_policy"]
