"""Fanning independent runs out over a Ray cluster as tasks (``bayes-sched compare --ray``).

Each call of ``function`` is one Ray task asking one CPU; results come back as they finish, in
the order of ``tasks`` once all are in, so a caller gets what a local process pool would give it.
A task's exception is raised here as itself (an :class:`InputError` stays one line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_on_ray(function: Callable[[T], R], tasks: Sequence[T],
               on_result: Callable[[R], Any] | None = None) -> list[R]:
    """``[function(task) for task in tasks]``, each call a task on the Ray cluster this process
    is connected to (:func:`~bayes_sched.backends.ray_session.connect_ray`); ``on_result`` is
    called as each one finishes.

    ``function`` must be importable on the cluster's nodes (Ray pickles it by reference).
    """
    import ray
    from ray.exceptions import RayTaskError

    remote = ray.remote(num_cpus=1, max_retries=0)(function)
    refs = [remote.remote(task) for task in tasks]
    results: dict[Any, R] = {}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                results[ref] = ray.get(ref)
            except RayTaskError as error:
                for other in pending:
                    ray.cancel(other, force=True)
                raise error.cause from None
            if on_result is not None:
                on_result(results[ref])
    return [results[ref] for ref in refs]
