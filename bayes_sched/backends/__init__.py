"""Real-cluster backends for the scheduling loop: one machine (subprocesses) and Ray; they differ
only in their :class:`~bayes_sched.backends.launcher.Launcher`.

:data:`BACKENDS` names each backend's factory of a launcher. A factory takes what ``serve`` knows
as keyword arguments (each given where the factory has a parameter of that name): ``gpus`` and
``gpu_type`` (the local node's), ``restart_delay`` and ``round_interval`` (seconds),
``address`` and ``connect_timeout`` (a cluster's, seconds). Plugins join through the entry-point
group ``bayes_sched.backends`` (:mod:`bayes_sched.registry`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bayes_sched.registry import Registry

if TYPE_CHECKING:
    from bayes_sched.backends.launcher import Launcher

#: Backend name -> factory of its launcher (``serve --backend NAME``).
BACKENDS: Registry[Launcher] = Registry("backend", group="bayes_sched.backends")
BACKENDS.register("local", "bayes_sched.backends.local:local_backend",
                  "jobs as subprocesses on this machine (real GPUs, or logical ones on the CPU)")
BACKENDS.register("ray", "bayes_sched.backends.ray_launcher:ray_backend",
                  "jobs as Ray actors on a Ray cluster, one per GPU")

__all__ = ["BACKENDS"]
