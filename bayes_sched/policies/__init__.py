"""Scheduling policies: each a small module against :mod:`bayes_sched.policies.base`.

The policy classes are imported on first use (module ``__getattr__``), so listing the policy names
(``bayes-sched simulate --help``) does not load torch, BoTorch or the search code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError

if TYPE_CHECKING:
    from bayes_sched.policies.base import Policy
    from bayes_sched.policies.bo import BayesOptPolicy
    from bayes_sched.policies.fifo import FifoPolicy
    from bayes_sched.policies.optimus import OptimusPolicy
    from bayes_sched.policies.pollux import PolluxPolicy
    from bayes_sched.policies.tiresias import TiresiasPolicy

#: Exported name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "Policy": "bayes_sched.policies.base",
    "BayesOptPolicy": "bayes_sched.policies.bo",
    "FifoPolicy": "bayes_sched.policies.fifo",
    "OptimusPolicy": "bayes_sched.policies.optimus",
    "PolluxPolicy": "bayes_sched.policies.pollux",
    "TiresiasPolicy": "bayes_sched.policies.tiresias",
}


class _Factory:
    """A policy class by name, imported when a policy is made."""

    def __init__(self, class_name: str) -> None:
        self.class_name = class_name

    def __call__(self) -> Policy:
        policy_class: Callable[[], Policy] = __getattr__(self.class_name)
        return policy_class()


#: Policy name -> factory of a fresh policy (policies keep state across rounds).
POLICIES: dict[str, Callable[[], Policy]] = {
    "pollux": _Factory("PolluxPolicy"),
    "tiresias": _Factory("TiresiasPolicy"),
    "optimus": _Factory("OptimusPolicy"),
    "fifo": _Factory("FifoPolicy"),
    "bo": _Factory("BayesOptPolicy"),
}


def make_policy(name: str) -> Policy:
    """A fresh policy by name; raises :class:`InputError` for an unknown one."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise InputError(
            f"unknown policy '{name}': expected one of {', '.join(POLICIES)}") from None
    return factory()


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["POLICIES", "BayesOptPolicy", "FifoPolicy", "OptimusPolicy", "PolluxPolicy", "Policy",
           "TiresiasPolicy", "make_policy"]
