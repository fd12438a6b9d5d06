"""A job submitted to a real cluster: its command and what its user declared (light: the
``submit`` command imports it without numpy or torch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from bayes_sched.tenants import DEFAULT_TENANT

if TYPE_CHECKING:
    from bayes_sched.jobs import BatchLimits


@dataclass(frozen=True)
class RealJobSpec:
    """A submitted job: its command and what its user declared.

    Attributes:
        name: unique job name (letters, digits, ``-``, ``_``, ``.``).
        argv: the command each replica runs.
        init_batch_size: total batch the learning rate is tuned for, ``B0`` (examples).
        max_batch_size: the largest total batch the job accepts (examples).
        max_local_bsz: the largest per-GPU micro-batch that fits in GPU memory (examples).
        target_epochs: epochs after which the job is done.
        min_local_bsz: the smallest per-GPU micro-batch (examples).
        max_replicas: most GPUs the job may use (``None``: no cap of its own).
        cwd: working directory of its processes (``None``: its job directory).
        env: the job file's ``[env]``: set over the allow-listed variables a job inherits
            (:mod:`bayes_sched.backends.job_env`), under those the backend sets.
        application: a label for reports (default: the name).
        tenant: the team that submitted it (:data:`~bayes_sched.tenants.DEFAULT_TENANT` where
            none is named; a spec saved before tenants existed reads as that one).
    """

    name: str
    argv: tuple[str, ...]
    init_batch_size: int
    max_batch_size: int
    max_local_bsz: int
    target_epochs: int
    min_local_bsz: int = 1
    max_replicas: int | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    application: str = ""
    tenant: str = DEFAULT_TENANT

    @property
    def limits(self) -> BatchLimits:
        from bayes_sched.jobs import BatchLimits

        return BatchLimits(self.init_batch_size, self.max_batch_size, self.min_local_bsz,
                           self.max_local_bsz)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        data["env"] = dict(self.env)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RealJobSpec:
        return cls(**{**data, "argv": tuple(data["argv"]), "env": dict(data.get("env", {}))})
