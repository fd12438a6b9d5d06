"""Pyro's parameter store, scoped: library fits never clear the caller's parameters."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import pyro

P = ParamSpec("P")
R = TypeVar("R")


def private_param_store(fit: Callable[P, R]) -> Callable[P, R]:
    """Run ``fit`` on an empty parameter store of its own (``ParamStoreDict.scope``): its guide's
    parameters neither see nor clobber those of the caller, whose store is restored afterwards."""

    @functools.wraps(fit)
    def scoped(*args: P.args, **kwargs: P.kwargs) -> R:
        with pyro.get_param_store().scope():
            return fit(*args, **kwargs)

    return scoped
