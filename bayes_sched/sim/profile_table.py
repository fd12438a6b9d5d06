"""The Gavel family on the typed Pollux world's profiles: a throughput table made from them.

Gavel's policies read steps/s per job type, scale factor and GPU type
(:class:`~bayes_sched.throughputs.ThroughputTable`) and run rigid jobs. To run them on a cluster
whose step times are measured per type where given and derived elsewhere
(:class:`~bayes_sched.sim.typed_profiles.TypeProfiles`), each Pollux job becomes a Gavel job:

* **job type** ``"<application> (batch size B0)"``: the application at its initial batch size
  ``B0`` (the batch its learning rate was tuned for), so every optimiser step makes one step of
  progress at ``B0``;
* **scale factor** the largest of 1, 2, 4, 8 not above the GPUs its user asked for;
* **length** the application's training length in steps at ``B0`` (its target progress);
* **steps/s alone** on ``n`` GPUs of a type: one over the seconds of a step
  (:func:`~perfmodel.throughput.seconds_per_step`) with ``B0`` split over ``n`` GPUs as a
  fixed-batch job splits it (:func:`~bayes_sched.jobs.split_batch`), on the consolidated
  placement (nodes of ``gpus_per_node``), from the type's measured or derived step times.

No pair is measured, so the packing policies see no co-location; the others run as on Gavel's
table. The result's ``setting`` names each type's profile source, as the Pollux world's does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bayes_sched.cluster import consolidated_placement
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.jobs import split_batch
from bayes_sched.policies.base import Policy
from bayes_sched.sim.gavel_jobs import MAX_SCALE_FACTOR, TableJobSpec, make_job
from bayes_sched.sim.physics import get_application
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.typed_profiles import NO_TYPE_PROFILES, TypeProfiles
from bayes_sched.sim.workload import Workload
from bayes_sched.throughputs import ThroughputTable
from perfmodel.throughput import seconds_per_step

#: Scale factors a job may have (Gavel's).
SCALE_FACTORS: tuple[int, ...] = (1, 2, 4, MAX_SCALE_FACTOR)


def job_type_of(application: str) -> str:
    """The Gavel job type of an application: ``"<application> (batch size B0)"``."""
    return f"{application} (batch size {get_application(application).limits.init_batch_size})"


def profile_throughputs(applications: Sequence[str], gpu_types: Sequence[str],
                        profiles: TypeProfiles = NO_TYPE_PROFILES, gpus_per_node: int = 4
                        ) -> ThroughputTable:
    """Steps/s alone of each application's job type at every scale factor on every type (the
    module's rule), as a table with no pairs.

    Raises:
        InputError: an (application, type) with no measured or derivable profile.
    """
    profiles.check(gpu_types, applications)
    solo: dict[tuple[str, int], dict[str, float]] = {}
    for application in dict.fromkeys(applications):
        limits = get_application(application).limits
        for scale in SCALE_FACTORS:
            local, accum = split_batch(limits.init_batch_size, scale, limits)
            placement = consolidated_placement(scale, gpus_per_node)
            rates = {}
            for gpu_type in gpu_types:
                step, sync = profiles.step_time(application, (gpu_type,), placement, local)
                rates[gpu_type] = 1.0 / seconds_per_step(step, sync, accum)
            solo[job_type_of(application), scale] = rates
    return ThroughputTable(solo=solo, pairs={}, source=profiles.source_path or "derived")


def table_jobs(workload: Workload) -> tuple[TableJobSpec, ...]:
    """The workload's jobs as Gavel jobs (the module's rule), named and timed as submitted."""
    jobs = []
    for spec in workload.jobs:
        scale = max(s for s in SCALE_FACTORS if s <= max(spec.num_replicas, 1))
        app = get_application(spec.application)
        jobs.append(make_job(spec.name, spec.submit_time, job_type_of(spec.application), scale,
                             app.target_progress, tenant=spec.tenant))
    return tuple(jobs)


def run_profile_table(workload: Workload, policy: Policy, spec: ClusterSpec,
                      profiles: TypeProfiles = NO_TYPE_PROFILES, **options: Any) -> RunResult:
    """Run ``workload``'s jobs as Gavel jobs under ``policy`` on ``spec`` at the steps/s of
    :func:`profile_throughputs` (``options``: :func:`~bayes_sched.sim.table_run.
    run_table_simulation`'s). The result's ``setting["profiles"]`` names each type's source."""
    from bayes_sched.sim.run import profile_setting
    from bayes_sched.sim.table_run import run_table_simulation

    applications = [job.application for job in workload.jobs]
    table = profile_throughputs(applications, spec.types, profiles,
                                int(spec.capacity().max()))
    result = run_table_simulation(table_jobs(workload), policy, spec, table=table,
                                  source=workload.name, **options)
    result.setting.update(profile_setting(spec, profiles, applications))
    return result


__all__ = ["SCALE_FACTORS", "job_type_of", "profile_throughputs", "run_profile_table",
           "table_jobs"]
