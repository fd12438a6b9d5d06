"""Ground-truth job physics from the real profiles of the Pollux artifact's six models.

The simulator, and only the simulator, reads these: a policy never sees them. Following the artifact
(Qiao et al., OSDI 2021, section 5.3 "simulator construction"):

* **Step time.** Seconds per iteration and the synchronisation part of it for a placement (GPUs
  per node, e.g. ``(2, 2)``) and per-GPU micro-batch ``m``: linear interpolation over ``m`` in
  ``placements.csv`` when that placement (up to rotation) was measured, otherwise linear
  interpolation over ``(nodes, replicas, m)`` in the union of ``placements.csv`` (averaged per
  ``(nodes, replicas, m)``) and ``scalability.csv``.
* **Statistical efficiency.** Gradient statistics ``(grad_sqr, grad_var)`` of epoch ``e`` at total
  batch size ``B``, interpolated linearly between the two measured batch sizes around ``B``
  (``validation-<B>.csv``); the gain of one step at scale ``B / B0`` is
  ``(var + sqr) / (var / scale + sqr)`` steps at the initial batch size ``B0``.
* **Progress** is counted in steps at ``B0``; epoch ``e`` ends at the smallest progress any measured
  batch size needed to finish it, and a job is complete when it finishes its last epoch.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator

from bayes_sched.cluster import consolidated_placement
from bayes_sched.errors import InputError
from bayes_sched.jobs import BatchLimits, split_batch
from perfmodel.datasets import POLLUX_MODELS, POLLUX_PARAMETERS, pollux_model_dir
from perfmodel.efficiency import scale_invariant_gain
from perfmodel.profiles import (
    StepTimeProfile,
    load_pollux_gradients,
    read_gradient_traces,
    read_placements_csv,
    read_scalability_csv,
)
from perfmodel.throughput import seconds_per_step, total_batch

APPLICATION_NAMES: tuple[str, ...] = POLLUX_MODELS

#: The GPU type the profiles were measured on (the artifact's AWS g4dn.12xlarge nodes).
GPU_TYPE = "t4"

#: Training length (epochs) and micro-batch limits the artifact used per application.
_ARTIFACT_SETTINGS: dict[str, dict[str, int]] = {
    "bert": {"max_epochs": 2},
    "cifar10": {"max_epochs": 100},
    "ncf": {"max_epochs": 10},
    "imagenet": {"max_epochs": 90},
    "deepspeech2": {"max_epochs": 80},
    "yolov3": {"max_epochs": 50, "max_local_bsz": 8},
}

#: Nodes beyond which the scalability measurements are extrapolated flat (the artifact's cap).
_MAX_PROFILED_NODES = 16


#: Applications the user brought (:func:`register_profiles`): name -> folder of its profiles.
_USER_PROFILES: dict[str, Path] = {}


def register_profiles(folder: str | Path) -> tuple[str, ...]:
    """Make the applications profiled in ``folder`` known to this process's simulator.

    Each sub-folder holding a ``placements.csv`` is an application named after the sub-folder, in
    the shipped models' formats (the README's): ``placements.csv``, ``scalability.csv`` and
    ``validation-<B>.csv`` gradient statistics, taken as measured on the simulated GPU type. Each
    is read and checked here. Returns the names.

    Raises:
        InputError: not a folder, no application in it, a shipped application's name, or a bad
            profile (naming the file, row and column).
    """
    root = Path(folder)
    expected = "expected a folder of NAME/ folders with placements.csv, scalability.csv and " \
               "validation-<B>.csv"
    if not root.is_dir():
        raise InputError(f"--profiles: not a folder; {expected}", root)
    names = []
    for sub in sorted(p for p in root.iterdir() if (p / "placements.csv").is_file()):
        if sub.name in APPLICATION_NAMES:
            raise InputError(f"--profiles: '{sub.name}' is a shipped application; expected "
                             "another name", sub)
        _USER_PROFILES[sub.name] = sub
        names.append(sub.name)
    if not names:
        raise InputError(f"--profiles: no application in it; {expected}", root)
    for name in names:
        get_application(name)
    return tuple(names)


def known_applications() -> tuple[str, ...]:
    """The shipped applications and those :func:`register_profiles` added."""
    return APPLICATION_NAMES + tuple(n for n in _USER_PROFILES if n not in APPLICATION_NAMES)


class StepTimes:
    """Step times of one model on one GPU type from its measurements (the module's step-time rule).

    Rows labelled by a digit-string placement (``placements.csv``) are looked up by placement (up
    to rotation) and interpolated over the micro-batch; every row, those averaged per ``(nodes,
    replicas, m)`` and the count-labelled ones (``scalability.csv``), is a point of the
    interpolation over ``(nodes, replicas, m)`` for placements not measured. Rows with gradient
    accumulation are left out (their step time is not one micro-step's).

    Args:
        profile: the measurements (:class:`~perfmodel.profiles.StepTimeProfile`).

    Raises:
        InputError: no row without accumulation (naming the profile's files).
    """

    def __init__(self, profile: StepTimeProfile) -> None:
        profile = profile.subset(profile.accum_steps == 0)
        if not len(profile):
            raise InputError(f"no step time without gradient accumulation for "
                             f"'{profile.model}': expected rows with accum_steps 0",
                             ", ".join(profile.sources) or None)
        self.sources = profile.sources
        labels = np.array([str(p) for p in profile.placement], dtype=object)
        by_placement = np.array([label.isdigit() for label in labels], dtype=bool)
        #: Per measured placement: sorted micro-batch sizes and (step, sync) times.
        self._placements: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for label in np.unique(labels[by_placement]):
            rows = labels == label
            order = np.argsort(profile.local_bsz[rows], kind="stable")
            key = _canonical(tuple(int(c) for c in str(label) if c != "0"))
            self._placements[key] = (
                profile.local_bsz[rows][order].astype(np.float64),
                profile.step_time[rows][order], profile.sync_time[rows][order],
            )
        # Points (nodes, replicas, m) for placements that were not measured.
        keys = np.stack([profile.num_nodes, profile.num_replicas, profile.local_bsz], 1)[
            by_placement]
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        count = np.bincount(inverse, minlength=len(unique))
        mean_step = np.bincount(inverse, profile.step_time[by_placement], len(unique)) / count
        mean_sync = np.bincount(inverse, profile.sync_time[by_placement], len(unique)) / count
        other = ~by_placement
        self._points = np.concatenate([
            unique.astype(np.float64),
            np.stack([profile.num_nodes[other], profile.num_replicas[other],
                      profile.local_bsz[other]], 1).astype(np.float64)])
        self._values = np.concatenate([
            np.stack([mean_step, mean_sync], 1),
            np.stack([profile.step_time[other], profile.sync_time[other]], 1)])
        self._interpolators: tuple[LinearNDInterpolator, NearestNDInterpolator] | None = None

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the interpolators (rebuilt on first use in the receiving process)."""
        return {**self.__dict__, "_interpolators": None}

    def __call__(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """``(step_time, sync_time)`` in seconds of one iteration at ``placement`` (GPUs per used
        node; zeros dropped, the order matters only up to rotation) and micro-batch
        ``local_bsz``."""
        return self._step_time(_canonical(tuple(c for c in placement if c > 0)), int(local_bsz))

    @cache  # noqa: B019 -- one StepTimes per model and type lives for the whole process
    def _step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        if not placement:
            raise ValueError("empty placement")
        measured = self._placements.get(placement)
        if measured is not None:
            bsz, step, sync = measured
            return (float(np.interp(local_bsz, bsz, step)), float(np.interp(local_bsz, bsz, sync)))
        if self._interpolators is None:
            if len(self._points) < 4:   # too few for a simplex in three dimensions
                self._interpolators = (NearestNDInterpolator(self._points, self._values),) * 2
            else:
                self._interpolators = (LinearNDInterpolator(self._points, self._values),
                                       NearestNDInterpolator(self._points, self._values))
        query = np.array([[min(len(placement), _MAX_PROFILED_NODES), sum(placement), local_bsz]],
                         dtype=np.float64)
        value = self._interpolators[0](query)[0]
        if not np.all(np.isfinite(value)):
            # Outside the measured hull (the artifact never went there): nearest measurement.
            value = self._interpolators[1](query)[0]
        return float(value[0]), float(value[1])


class Application:
    """The measured behaviour of one model: step times, gradient statistics and training length."""

    def __init__(self, name: str) -> None:
        if name not in known_applications():
            raise InputError(f"unknown application '{name}': expected one of "
                             f"{', '.join(known_applications())}")
        settings = _ARTIFACT_SETTINGS.get(name, {})
        user = _USER_PROFILES.get(name)
        folder = pollux_model_dir(name) if user is None else user
        self.name = name
        self.gradients = (load_pollux_gradients(name) if user is None
                          else read_gradient_traces(folder))
        self.batch_sizes = np.array(sorted(self.gradients), dtype=np.int64)
        placements = read_placements_csv(folder / "placements.csv", name)
        scalability = read_scalability_csv(folder / "scalability.csv", name)
        self.limits = BatchLimits(
            init_batch_size=int(self.batch_sizes[0]),
            max_batch_size=int(self.batch_sizes[-1]),
            min_local_bsz=int(placements.local_bsz.min()),
            max_local_bsz=int(settings.get("max_local_bsz", placements.local_bsz.max())),
        )
        self.max_epochs = int(settings.get(
            "max_epochs", min(len(t.progress) for t in self.gradients.values())))
        self.step_times = StepTimes(StepTimeProfile.concat((placements, scalability)))
        # Progress (steps at B0) at the end of each epoch: the fastest measured batch size.
        ends = np.stack([t.progress[: self.max_epochs] for t in self.gradients.values()])
        self.epoch_end_progress = ends.min(axis=0)
        self._sqr = np.stack([self.gradients[int(b)].grad_sqr[: self.max_epochs]
                              for b in self.batch_sizes])
        self._var = np.stack([self.gradients[int(b)].grad_var[: self.max_epochs]
                              for b in self.batch_sizes])

    @property
    def examples_per_epoch(self) -> int:
        """Examples in one epoch (the dataset's size, as the job knows it): the training length
        over the epochs, at the initial batch size."""
        return int(round(self.target_progress * self.limits.init_batch_size / self.max_epochs))

    @property
    def target_progress(self) -> float:
        """Progress (steps at the initial batch size) at which the job is complete."""
        return float(self.epoch_end_progress[-1])

    def progress_at_epoch(self, epoch: int) -> float:
        """Progress at the start of ``epoch`` (0 for the first)."""
        return 0.0 if epoch <= 0 else float(self.epoch_end_progress[epoch - 1])

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """``(step_time, sync_time)`` in seconds of one iteration at a placement and micro-batch
        (:class:`StepTimes` of the measured profile)."""
        return self.step_times(placement, local_bsz)

    @cache  # noqa: B019
    def grad_stats(self, batch_size: int, epoch: int) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` during ``epoch`` at total batch size ``batch_size``."""
        epoch = min(max(epoch, 0), self.max_epochs - 1)
        b = float(np.clip(batch_size, self.batch_sizes[0], self.batch_sizes[-1]))
        sqr = float(np.interp(b, self.batch_sizes, self._sqr[:, epoch]))
        var = float(np.interp(b, self.batch_sizes, self._var[:, epoch]))
        return sqr, var

    def gain(self, batch_size: int, epoch: int) -> float:
        """Progress (steps at ``B0``) made by one step at ``batch_size`` during ``epoch``."""
        sqr, var = self.grad_stats(batch_size, epoch)
        return scale_invariant_gain(sqr, var, batch_size / self.limits.init_batch_size)

    def standalone_runtime(self, num_replicas: int, batch_size: int, gpus_per_node: int = 4
                           ) -> float:
        """Seconds to train alone on ``num_replicas`` consolidated GPUs at a fixed batch size,
        with the batch split as a fixed-batch job splits it; no restarts (the fairness baseline)."""
        placement = consolidated_placement(num_replicas, gpus_per_node)
        local_bsz, accum_steps = split_batch(batch_size, num_replicas, self.limits)
        step, sync = self.step_time(placement, local_bsz)
        step_seconds = seconds_per_step(step, sync, accum_steps)
        total = total_batch(num_replicas, local_bsz, accum_steps)
        seconds = 0.0
        for epoch in range(self.max_epochs):
            work = self.progress_at_epoch(epoch + 1) - self.progress_at_epoch(epoch)
            seconds += work / self.gain(total, epoch) * step_seconds
        return seconds


def _canonical(placement: tuple[int, ...]) -> tuple[int, ...]:
    """The lexicographically smallest rotation: measured placements are labelled this way."""
    if len(placement) <= 1:
        return placement
    return min(placement[i:] + placement[:i] for i in range(len(placement)))


@cache
def get_application(name: str) -> Application:
    """The (cached) :class:`Application` of a shipped or registered model."""
    return Application(name)


@cache
def reported_gradient_bytes(application: str) -> float | None:
    """Bytes of one gradient all-reduce a simulated job of ``application`` reports, as the
    training client's ``start`` report does: a shipped model's published parameter count
    (:data:`perfmodel.datasets.POLLUX_PARAMETERS`) times 4 (fp32 gradients); ``None`` for an
    application a user registered (its size is unknown)."""
    from perfmodel.allreduce import gradient_bytes

    parameters = POLLUX_PARAMETERS.get(application)
    return None if parameters is None else gradient_bytes(parameters)
