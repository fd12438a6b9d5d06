"""The Pollux world on typed GPUs: step times of the Pollux artifact's six models per GPU type.

The artifact measured its models on one GPU type only (T4, :data:`~bayes_sched.sim.physics.GPU_TYPE`).
Gavel's artifact measured 26 job types alone on K80, P100 and V100 (steps/s per job at batch
``b`` on one GPU, :func:`~bayes_sched.throughputs.load_gavel_throughputs`). Where no profile of a
model on a GPU type is shipped, one is *derived* here by a documented rule; the report says which
profiles are derived (:func:`derivation_table`).

**Rule** (issue 15: "scale the T4 profile by the measured per-type throughput ratio of the closest
Gavel model"):

1. *Closest Gavel model* (:data:`CLOSEST_GAVEL_MODEL`): the same model and dataset where Gavel
   has it (cifar10 -> ResNet-18 on CIFAR-10, imagenet -> ResNet-50 on ImageNet), else the same task
   (ncf -> Recommendation, both recommenders on MovieLens), else the same architecture family (bert
   -> Transformer: self-attention; deepspeech2 -> LM: recurrent (LSTM); yolov3 -> ResNet-50: a deep
   convolutional net on ImageNet-sized images).
2. *Per-type ratio at the micro-batch:* Gavel measured each family at several batch sizes per GPU
   (one GPU, scale factor 1). The ratio ``r_X(m) = V100 steps/s / X steps/s`` is interpolated
   linearly in ``log b`` over the family's batch sizes measured on both types, at the micro-batch
   ``m`` of the step, and held constant outside them (the measured range is not extrapolated).
3. *Anchor T4 to V100:* no shipped table measured T4 and any Gavel type together, so T4 is placed
   against V100 by the vendors' peak FP32 rates, one model-independent number
   (:data:`T4_PEAK_FP32_TFLOPS` / :data:`V100_PEAK_FP32_TFLOPS`; the V100 SXM2 16 GB of AWS p3, on
   which Gavel measured). This is the one assumption the data cannot make: it sets the overall
   speed of the derived types against the T4 ones, not their order.
4. *Compute scales, the network does not:* the compute part of an iteration (``step - sync``)
   on type X is the T4 one times ``f_X(m) = (T4 peak / V100 peak) * r_X(m)`` (so ``f_v100 =
   0.516`` at every ``m``); the synchronisation part is kept as measured, since every node of a
   cluster spec has the artifact's interconnect (PCIe 3.0 within a node, 50 Gbit/s between nodes:
   :data:`~bayes_sched.cluster_spec.DEFAULT_TOPOLOGY`); V100 NVLink is not modelled.
5. *A job across types* runs synchronous data-parallel SGD: every iteration waits for its
   slowest GPU, so its step takes the largest derived step time among the types it holds.

**Measured per-type profiles** (:class:`TypeProfiles`, read from a folder by
:func:`perfmodel.typed_profiles.read_typed_profiles`) replace the rule wherever they exist: an
application's step times on a type it was measured on are that type's measurements
(:class:`~bayes_sched.sim.physics.StepTimes`: compute and sync as measured, on any type a cluster
spec may name); elsewhere they are derived as above from the T4 profile in use (a
measured T4 profile where given, else the artifact's). Each (application, type) is thus
``measured`` or ``derived`` (:meth:`TypeProfiles.source`); a type with neither for an application
the workload runs is refused. A job across types still waits for its slowest type (rule 5).

Unchanged per type: gradient statistics (statistical efficiency belongs to the model and batch, not
the GPU), training length and batch limits (the K80's 12 GB against the T4's 16 GB is not modelled;
the models' largest micro-batches fit in 12 GB in Gavel's runs except where Gavel's table has 0,
which this rule skips). Applications a user registered (``--profiles``) have no closest Gavel model
and run on the T4 and on the types measured for them only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.gpu_types import GPU_TYPES
from bayes_sched.sim.physics import (
    GPU_TYPE,
    Application,
    StepTimes,
    get_application,
    known_applications,
)
from bayes_sched.throughputs import load_gavel_throughputs
from perfmodel.profiles import StepTimeProfile

#: NVIDIA's published peak FP32 rates (TFLOP/s): the Tesla T4 datasheet, and the V100 SXM2 datasheet
#: (the GPU type table's figures, :data:`~bayes_sched.gpu_types.GPU_TYPES`).
T4_PEAK_FP32_TFLOPS = GPU_TYPES["t4"].peak_flops / 1e12
V100_PEAK_FP32_TFLOPS = GPU_TYPES["v100"].peak_flops / 1e12

#: The Gavel type the T4 is anchored to (rule 3).
ANCHOR_TYPE = "v100"

#: GPU types a profile can be derived for: those Gavel measured.
DERIVED_TYPES: tuple[str, ...] = ("k80", "p100", "v100")

#: Every GPU type the Pollux world can simulate: the measured one and the derived ones.
PROFILED_TYPES: tuple[str, ...] = (GPU_TYPE, *DERIVED_TYPES)


@dataclass(frozen=True)
class ClosestModel:
    """A Pollux model's closest Gavel model: its family (job types ``"<family> (batch size b)"``,
    or the bare name where Gavel measured one batch) and why it is the closest."""

    family: str
    reason: str


#: Rule 1: each shipped Pollux model's closest Gavel model.
CLOSEST_GAVEL_MODEL: Mapping[str, ClosestModel] = MappingProxyType({
    "cifar10": ClosestModel("ResNet-18", "same model and dataset (ResNet-18, CIFAR-10)"),
    "imagenet": ClosestModel("ResNet-50", "same model and dataset (ResNet-50, ImageNet)"),
    "ncf": ClosestModel("Recommendation", "same task (recommendation on MovieLens)"),
    "bert": ClosestModel("Transformer", "same family (self-attention)"),
    "deepspeech2": ClosestModel("LM", "same family (recurrent, LSTM)"),
    "yolov3": ClosestModel("ResNet-50", "same family (deep CNN, ImageNet-sized images)"),
})


def _check_type(gpu_type: str) -> None:
    if gpu_type not in PROFILED_TYPES:
        raise InputError(f"no profile on GPU type '{gpu_type}': the Pollux world has "
                         f"{GPU_TYPE} (measured) and {', '.join(DERIVED_TYPES)} (derived)")


@cache
def family_log_ratios(family: str, gpu_type: str) -> tuple[np.ndarray, np.ndarray]:
    """``(log b, log r)`` sorted by batch: the log batch sizes per GPU of ``family`` that Gavel
    measured on both ``gpu_type`` and the anchor, and the log of ``anchor steps/s / gpu_type
    steps/s`` there (rule 2); shapes ``(K,)``. Entries of 0 (out of memory) are skipped."""
    table = load_gavel_throughputs("simulation")
    batches, ratios = [], []
    for job_type, scale_factor in table.solo:
        if scale_factor != 1:
            continue
        if job_type == family:
            batch = 1.0  # measured at one batch: the ratio is flat
        elif job_type.startswith(f"{family} (batch size ") and job_type.endswith(")"):
            batch = float(job_type[len(family) + len(" (batch size "):-1])
        else:
            continue
        anchor = table.steps_per_second(job_type, 1, ANCHOR_TYPE) or 0.0
        other = table.steps_per_second(job_type, 1, gpu_type) or 0.0
        if anchor > 0 and other > 0:
            batches.append(batch)
            ratios.append(anchor / other)
    if not batches:
        raise InputError(f"Gavel's table has no measurement of '{family}' on both "
                         f"{ANCHOR_TYPE} and {gpu_type}")
    order = np.argsort(batches)
    return np.log(np.asarray(batches))[order], np.log(np.asarray(ratios))[order]


def closest_model(application: str) -> ClosestModel:
    """The closest Gavel model of a shipped application (:data:`CLOSEST_GAVEL_MODEL`).

    Raises:
        InputError: an application with no closest Gavel model (a user's own profiles).
    """
    try:
        return CLOSEST_GAVEL_MODEL[application]
    except KeyError:
        raise InputError(f"application '{application}' has no closest Gavel model: its profile "
                         f"exists on {GPU_TYPE} only; expected a cluster of {GPU_TYPE} nodes "
                         "for it") from None


def compute_factor(application: str, gpu_type: str, local_bsz: float) -> float:
    """How much longer one iteration's compute takes on ``gpu_type`` than on the T4 at micro-batch
    ``local_bsz`` (rules 2-4): 1 on the T4, ``(T4 peak / V100 peak) * r(m)`` on a derived type."""
    _check_type(gpu_type)
    if gpu_type == GPU_TYPE:
        return 1.0
    log_b, log_r = family_log_ratios(closest_model(application).family, gpu_type)
    ratio = float(np.exp(np.interp(np.log(max(local_bsz, 1.0)), log_b, log_r)))
    return T4_PEAK_FP32_TFLOPS / V100_PEAK_FP32_TFLOPS * ratio


@cache
def typed_step_time(application: str, gpu_types: tuple[str, ...], placement: tuple[int, ...],
                    local_bsz: int) -> tuple[float, float]:
    """``(step_time, sync_time)`` in seconds of one iteration of ``application`` on a placement
    (GPUs per used node) whose GPUs are of ``gpu_types`` (the distinct types it holds): the T4
    measurement's compute scaled per type, its sync kept (rule 4), the slowest type's (rule 5)."""
    step, sync = get_application(application).step_time(placement, local_bsz)
    factor = max(compute_factor(application, t, local_bsz) for t in gpu_types)
    return sync + max(step - sync, 0.0) * factor, sync


ProfileSource = Literal["measured", "derived"]


class TypeProfiles:
    """Step times measured per (application, GPU type), used where present; derived elsewhere
    (the module's rule).

    Args:
        measured: ``{application: {gpu_type: profile}}`` (what
            :func:`perfmodel.typed_profiles.read_typed_profiles` returns, without untyped entries).
        source: where they were read from (for messages and reports).

    Raises:
        InputError: an application the simulator does not know (its gradient statistics and
            training length come from the shipped or registered profile), or an untyped entry.
    """

    def __init__(self, measured: Mapping[str, Mapping[str | None, StepTimeProfile]] | None = None,
                 source: str = "") -> None:
        self.source_path = source
        self._measured: dict[tuple[str, str], StepTimes] = {}
        known = known_applications()
        for application, by_type in (measured or {}).items():
            if application not in known:
                raise InputError(f"per-type profiles of '{application}': an unknown "
                                 "application; expected a shipped one or one registered with "
                                 f"its untyped profile ({', '.join(known)})", source or None)
            for gpu_type, profile in by_type.items():
                if gpu_type is None:
                    raise InputError(f"'{application}' has untyped step-time files beside "
                                     "per-type ones: expected placements-<type>.csv and "
                                     "scalability-<type>.csv", source or None)
                self._measured[application, gpu_type] = StepTimes(profile)

    @classmethod
    def read(cls, folder: str | Path) -> TypeProfiles:
        """The measured per-type profiles in ``folder`` (either layout of
        :mod:`perfmodel.typed_profiles`)."""
        from perfmodel.typed_profiles import read_typed_profiles

        return cls(read_typed_profiles(folder), str(folder))

    def __bool__(self) -> bool:
        return bool(self._measured)

    @property
    def measured(self) -> tuple[tuple[str, str], ...]:
        """The measured ``(application, gpu_type)`` pairs, sorted."""
        return tuple(sorted(self._measured))

    def source(self, application: str, gpu_type: str) -> ProfileSource | None:
        """Where ``application``'s step times on ``gpu_type`` come from: ``"measured"`` (a
        measured per-type profile, or the application's own profile on the T4), ``"derived"``
        (the rule), or ``None`` (neither: the pair cannot be simulated)."""
        if (application, gpu_type) in self._measured or gpu_type == GPU_TYPE:
            return "measured"
        if gpu_type in DERIVED_TYPES and application in CLOSEST_GAVEL_MODEL:
            return "derived"
        return None

    def _base(self, application: str) -> StepTimes:
        """The T4 step times derived types scale: a measured T4 profile, else the application's."""
        measured = self._measured.get((application, GPU_TYPE))
        return measured if measured is not None else get_application(application).step_times

    def one_type(self, application: str, gpu_type: str, placement: tuple[int, ...],
                 local_bsz: int) -> tuple[float, float]:
        """``(step_time, sync_time)`` in seconds on GPUs of one type: measured, or derived from
        the T4 profile in use (the T4 itself: that profile).

        Raises:
            InputError: a pair with no source (:meth:`source`).
        """
        measured = self._measured.get((application, gpu_type))
        if measured is not None:
            return measured(placement, local_bsz)
        if self.source(application, gpu_type) is None:
            raise InputError(f"no profile of '{application}' on GPU type '{gpu_type}': "
                             f"expected a measured one ({self.source_path or 'none given'}) "
                             f"or a derivable type ({', '.join(DERIVED_TYPES)})")
        step, sync = self._base(application)(placement, local_bsz)
        if gpu_type == GPU_TYPE:
            return step, sync
        factor = compute_factor(application, gpu_type, local_bsz)
        return sync + max(step - sync, 0.0) * factor, sync

    def step_time(self, application: str, gpu_types: Sequence[str], placement: tuple[int, ...],
                  local_bsz: int) -> tuple[float, float]:
        """``(step_time, sync_time)`` of a job holding GPUs of ``gpu_types``: the slowest type's
        (rule 5)."""
        return max(self.one_type(application, t, placement, local_bsz) for t in gpu_types)

    def compute_ratio(self, application: str, gpu_type: str, local_bsz: float) -> float:
        """One GPU's compute time (``step - sync``) on ``gpu_type`` over the T4's in use, at
        micro-batch ``local_bsz``: the rule's factor on a derived type, the measured ratio on a
        measured one."""
        m = int(local_bsz)
        step, sync = self.one_type(application, gpu_type, (1,), m)
        base_step, base_sync = self._base(application)((1,), m)
        return (step - sync) / (base_step - base_sync) if base_step > base_sync else float("nan")

    def check(self, gpu_types: Sequence[str], applications: Sequence[str]) -> None:
        """Refuse a cluster type no application could run on, or an (application, type) pair
        with no source, naming both."""
        measured_types = {t for _, t in self._measured}
        for gpu_type in gpu_types:
            if gpu_type not in measured_types:
                _check_type(gpu_type)
        for application in dict.fromkeys(applications):
            for gpu_type in gpu_types:
                if self.source(application, gpu_type) is None:
                    if gpu_type in DERIVED_TYPES:
                        closest_model(application)  # its one-line reason
                    raise InputError(f"no profile of '{application}' on GPU type "
                                     f"'{gpu_type}': expected a measured one "
                                     f"({self.source_path or 'no per-type profiles given'})")

    def sources_by_type(self, gpu_types: Sequence[str], applications: Sequence[str]
                        ) -> dict[str, str]:
        """``{gpu_type: "measured" | "derived" | "measured (a, b), derived (c)"}``: each type's
        profile source over ``applications`` (what a run's results name)."""
        out: dict[str, str] = {}
        for gpu_type in gpu_types:
            by: dict[str, list[str]] = {}
            for application in sorted(set(applications)):
                by.setdefault(str(self.source(application, gpu_type)), []).append(application)
            out[gpu_type] = (next(iter(by)) if len(by) == 1 else
                             ", ".join(f"{k} ({', '.join(v)})" for k, v in sorted(by.items())))
        return out


#: No measured per-type profiles: every type but the T4 derived.
NO_TYPE_PROFILES = TypeProfiles()


class TypedApplication:
    """An :class:`~bayes_sched.sim.physics.Application` on GPUs of given types: its step times
    per :func:`typed_step_time`, everything else the application's own.

    Args:
        app: the measured application.
        gpu_types: the distinct GPU types the job holds.
        profiles: measured per-type profiles, used where present (:class:`TypeProfiles`).
    """

    def __init__(self, app: Application, gpu_types: Sequence[str],
                 profiles: TypeProfiles = NO_TYPE_PROFILES) -> None:
        self.app = app
        self.gpu_types = tuple(sorted(set(gpu_types)))
        self.profiles = profiles
        profiles.check(self.gpu_types, (app.name,))

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        if self.profiles:
            return self.profiles.step_time(self.app.name, self.gpu_types, placement,
                                           int(local_bsz))
        if self.gpu_types == (GPU_TYPE,):
            return self.app.step_time(placement, local_bsz)
        return typed_step_time(self.app.name, self.gpu_types,
                               tuple(c for c in placement if c > 0), int(local_bsz))

    def standalone_runtime(self, num_replicas: int, batch_size: int, gpus_per_node: int = 4
                           ) -> float:
        """As :meth:`Application.standalone_runtime`, on these GPU types: the T4 run scaled by
        the ratio of the two step times at its placement and micro-batch."""
        seconds = self.app.standalone_runtime(num_replicas, batch_size, gpus_per_node)
        if self.gpu_types == (GPU_TYPE,) and not self.profiles:
            return seconds
        from bayes_sched.cluster import consolidated_placement
        from bayes_sched.jobs import split_batch

        placement = consolidated_placement(num_replicas, gpus_per_node)
        local_bsz, _ = split_batch(batch_size, num_replicas, self.app.limits)
        step, _ = self.app.step_time(placement, local_bsz)
        typed, _ = self.step_time(placement, local_bsz)
        # Step time scales every step alike (accumulation repeats the compute, scaled the same).
        return seconds * typed / step if step > 0 else seconds


def slowest_type(app: Application, gpu_types: Sequence[str],
                 profiles: TypeProfiles = NO_TYPE_PROFILES) -> str:
    """The type among ``gpu_types`` whose compute is slowest for ``app`` at its initial per-GPU
    batch (what paces a job across types; the label of its measurements there)."""
    if len(gpu_types) == 1:
        return gpu_types[0]
    limits = app.limits
    local = min(max(limits.init_batch_size, limits.min_local_bsz), limits.max_local_bsz)
    return max(gpu_types, key=lambda t: profiles.compute_ratio(app.name, t, local))


def check_cluster_types(gpu_types: Sequence[str], applications: Sequence[str],
                        profiles: TypeProfiles = NO_TYPE_PROFILES) -> None:
    """Refuse a cluster the Pollux world cannot simulate for these applications.

    Raises:
        InputError: a GPU type with no measured or derived profile, or an application with no
            derived profile on a cluster with no T4 node (naming both).
    """
    if profiles:
        profiles.check(gpu_types, applications)
        return
    for gpu_type in gpu_types:
        _check_type(gpu_type)
    if GPU_TYPE in gpu_types:
        return
    for application in dict.fromkeys(applications):
        closest_model(application)


def derivation_table(gpu_types: Sequence[str] = PROFILED_TYPES,
                     applications: Sequence[str] | None = None,
                     profiles: TypeProfiles = NO_TYPE_PROFILES) -> list[dict[str, object]]:
    """One row per (application, GPU type) with a profile: ``application, gpu_type, profile``
    (``measured`` or ``derived``, :meth:`TypeProfiles.source`), ``gavel_model``, ``reason``, and
    the compute factor against the T4 at the application's smallest, initial and largest
    micro-batch (``factor_min_bsz``, ``factor_init_bsz``, ``factor_max_bsz``;
    :meth:`TypeProfiles.compute_ratio`) -- the report's table of profiles per type."""
    from bayes_sched.sim.physics import APPLICATION_NAMES

    rows: list[dict[str, object]] = []
    for name in applications or APPLICATION_NAMES:
        app = get_application(name)
        limits = app.limits
        init_local = min(max(limits.init_batch_size, limits.min_local_bsz), limits.max_local_bsz)
        for gpu_type in gpu_types:
            source = profiles.source(name, gpu_type)
            if source is None:
                continue
            closest = CLOSEST_GAVEL_MODEL.get(name)
            typed = (name, gpu_type) in profiles.measured
            if typed:
                reason = f"measured ({profiles.source_path})"
            elif source == "measured":
                reason = "Pollux artifact" if name in APPLICATION_NAMES else "--profiles"
            else:
                reason = closest.reason if closest else ""
            rows.append({
                "application": name, "gpu_type": gpu_type, "profile": source,
                "gavel_model": closest.family if source == "derived" and closest else "",
                "reason": reason,
                "factor_min_bsz": profiles.compute_ratio(name, gpu_type, limits.min_local_bsz),
                "factor_init_bsz": profiles.compute_ratio(name, gpu_type, init_local),
                "factor_max_bsz": profiles.compute_ratio(name, gpu_type, limits.max_local_bsz),
            })
    return rows


__all__ = ["ANCHOR_TYPE", "CLOSEST_GAVEL_MODEL", "DERIVED_TYPES", "NO_TYPE_PROFILES",
           "PROFILED_TYPES", "ProfileSource", "TypeProfiles",
           "T4_PEAK_FP32_TFLOPS", "V100_PEAK_FP32_TFLOPS", "ClosestModel", "TypedApplication",
           "check_cluster_types", "closest_model", "slowest_type", "compute_factor", "derivation_table",
           "family_log_ratios", "typed_step_time"]
