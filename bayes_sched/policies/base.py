"""The policy interface: one decision method over what a real scheduler can see.

A policy is an object with

* ``name``: a short label;
* ``needs``: what it reads from the estimation stage, names from
  :data:`bayes_sched.estimates.NEEDS` (``()`` for a policy that reads only the job views);
* ``default_estimators`` (optional): ``{need: estimator name}``, plain data: what serves a need
  when the user names no estimator (:mod:`bayes_sched.estimation.choose`; e.g. the world's
  ``oracle`` for the Gavel family, which reads the measured table as Gavel does). Estimators are
  chosen outside the policy; a policy imports none;
* ``job_settings(spec) -> JobSettings``: how a job runs under it (a fixed user batch size and GPU
  count for the baselines, a tuned batch for Pollux);
* ``decide(cluster, jobs, estimates) -> {job name: GPUs per node}``: the allocation for the next
  round, given the round's :class:`~bayes_sched.estimates.Estimates`;
* ``stats() -> {name: figure}``: what a run reports about the policy (solver failures, fallbacks,
  trials, ...). Run drivers and experiments read these, never the policy's attributes.

Adding a policy means adding a module with such a class and registering it in
:data:`bayes_sched.policies.POLICIES`; the simulator and loop do not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView


class Policy(Protocol):
    name: str
    needs: tuple[str, ...]

    def job_settings(self, spec: JobSpec) -> JobSettings: ...

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations: ...

    def stats(self) -> Mapping[str, float]: ...
