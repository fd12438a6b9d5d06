"""Per-GPU-type step-time profiles synthesised from the shipped T4 profiles, for tests and demos.

The shipped data measured the Pollux artifact's six models on T4 GPUs only, so a folder of
per-type measurements (:mod:`perfmodel.typed_profiles`) has to be made up to exercise the typed
world's measured profiles (:class:`~bayes_sched.sim.typed_profiles.TypeProfiles`); no other
project's measurements are used. :func:`synthesise_type_profiles` writes one: for each application
and type, every row of the shipped ``placements.csv`` and ``scalability.csv`` (same placements and
micro-batches) with

* the compute part (``step - sync``) times the type's factor against the T4: the derivation rule's
  (:func:`~bayes_sched.sim.typed_profiles.compute_factor`) on a type it covers (K80, P100, V100),
  else the ratio of peak FP32 rates ``T4 / type`` (:data:`~bayes_sched.gpu_types.GPU_TYPES`, or a
  type a cluster file declares: ``catalog``, :attr:`~bayes_sched.cluster_spec.ClusterSpec.catalog`);
* the sync part as measured on the T4s (the artifact's network); or, with ``sync="links"``, the
  T4 one on rows across nodes (the NIC sets it, and every node keeps the artifact's) and the T4
  one times ``T4 peer link / type's peer link`` on rows of several GPUs in one node (a ring
  all-reduce's time is bytes over its slowest link's rate, :mod:`perfmodel.allreduce`);
* each part times independent log-normal noise ``exp(N(0, noise^2))`` per row (the spread of
  repeated measurements), seeded.

The files are in the Pollux formats, laid out by type (``TYPE/MODEL/placements.csv``) or by model
(``MODEL/placements-TYPE.csv``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.gpu_types import GPU_TYPES, GpuType
from bayes_sched.sim.physics import APPLICATION_NAMES, GPU_TYPE
from bayes_sched.sim.typed_profiles import DERIVED_TYPES, compute_factor
from perfmodel.datasets import pollux_model_dir
from perfmodel.profiles import (
    PLACEMENTS_COLUMNS,
    SCALABILITY_COLUMNS,
    read_placements_csv,
    read_scalability_csv,
)


def type_factor(application: str, gpu_type: str, local_bsz: float,
                catalog: Mapping[str, GpuType] = GPU_TYPES) -> float:
    """Compute time on ``gpu_type`` (a type of ``catalog``) over the T4's at micro-batch
    ``local_bsz`` (the module's rule). Raises :class:`InputError` for a type with neither rule
    nor a peak FP32 rate."""
    if gpu_type == GPU_TYPE or gpu_type in DERIVED_TYPES:
        return compute_factor(application, gpu_type, local_bsz)
    gpu = catalog.get(gpu_type)
    if gpu is None or not math.isfinite(gpu.peak_flops):
        raise InputError(f"cannot synthesise a profile on GPU type '{gpu_type}': expected a "
                         f"type with a published peak FP32 rate ({', '.join(catalog)})")
    return GPU_TYPES[GPU_TYPE].peak_flops / gpu.peak_flops


def _sync_scale(profile_nodes: np.ndarray, profile_replicas: np.ndarray, gpu_type: str,
                catalog: Mapping[str, GpuType]) -> np.ndarray:
    """Per row, the ``sync="links"`` rule's factor on the T4's sync time: the ratio of peer
    links on rows of several GPUs in one node, 1 elsewhere; shape ``(N,)``."""
    gpu = catalog.get(gpu_type)
    if gpu is None or not math.isfinite(gpu.link_bandwidth):
        raise InputError(f"cannot scale sync times to GPU type '{gpu_type}': expected a type "
                         f"with a known peer link ({', '.join(catalog)})")
    within = (profile_nodes == 1) & (profile_replicas > 1)
    return np.where(within, GPU_TYPES[GPU_TYPE].link_bandwidth / gpu.link_bandwidth, 1.0)


def _rows(application: str, gpu_type: str, kind: str, noise: float,
          rng: np.random.Generator, catalog: Mapping[str, GpuType] = GPU_TYPES,
          sync_rule: str = "t4") -> list[str]:
    """CSV lines (header first) of ``application``'s shipped ``kind`` file on ``gpu_type``."""
    folder = pollux_model_dir(application)
    header: tuple[str, ...]
    if kind == "placements":
        profile = read_placements_csv(folder / "placements.csv", application)
        header, keys = PLACEMENTS_COLUMNS, [[str(p)] for p in profile.placement]
    else:
        profile = read_scalability_csv(folder / "scalability.csv", application)
        header = SCALABILITY_COLUMNS
        keys = [[str(n), str(r)] for n, r in zip(profile.num_nodes, profile.num_replicas,
                                                   strict=True)]
    factors = np.array([type_factor(application, gpu_type, m, catalog)
                        for m in profile.local_bsz])
    draws = np.exp(rng.normal(0.0, noise, size=(len(profile), 2)))
    compute = np.maximum(profile.step_time - profile.sync_time, 0.0) * factors * draws[:, 0]
    sync = profile.sync_time * draws[:, 1]
    if sync_rule == "links":
        sync = sync * _sync_scale(profile.num_nodes, profile.num_replicas, gpu_type, catalog)
    lines = [",".join(header)]
    for key, m, c, s in zip(keys, profile.local_bsz, compute, sync, strict=True):
        lines.append(",".join([*key, str(int(m)), repr(float(c + s)), repr(float(s))]))
    return lines


def synthesise_type_profiles(folder: str | Path, gpu_types: Sequence[str],
                             applications: Sequence[str] = APPLICATION_NAMES,
                             noise: float = 0.05, seed: int = 0,
                             layout: Literal["by-type", "by-model"] = "by-type",
                             catalog: Mapping[str, GpuType] = GPU_TYPES,
                             sync: Literal["t4", "links"] = "t4") -> Path:
    """Write synthetic measured profiles of ``applications`` on ``gpu_types`` (types of
    ``catalog``) into ``folder`` (created; see the module for the rule, ``sync``'s two rules and
    the layouts) and return it.

    Raises:
        InputError: an application that is not shipped, a type that cannot be synthesised, a
            negative ``noise`` or an unknown ``layout``.
    """
    if noise < 0:
        raise InputError(f"noise is {noise}: expected a log-scale SD >= 0")
    if layout not in ("by-type", "by-model"):
        raise InputError(f"layout is {layout!r}: expected 'by-type' or 'by-model'")
    if sync not in ("t4", "links"):
        raise InputError(f"sync is {sync!r}: expected 't4' or 'links'")
    root = Path(folder)
    rng = np.random.default_rng(seed)
    for application in applications:
        if application not in APPLICATION_NAMES:
            raise InputError(f"cannot synthesise '{application}': expected a shipped model "
                             f"({', '.join(APPLICATION_NAMES)})")
        for gpu_type in gpu_types:
            for kind in ("placements", "scalability"):
                lines = _rows(application, gpu_type, kind, noise, rng, catalog, sync)
                if layout == "by-type":
                    path = root / gpu_type / application / f"{kind}.csv"
                else:
                    path = root / application / f"{kind}-{gpu_type}.csv"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


__all__ = ["synthesise_type_profiles", "type_factor"]
