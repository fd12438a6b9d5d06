"""Few-row fits per GPU type with and without the physics prior of sync time.

A job measured on a new GPU type on one GPU only (its 1-GPU rows there) predicts its multi-GPU
step times on that type from its prior: the default (:meth:`StepTimePrior.for_profile`) knows
nothing of the type's links, the physics prior (:func:`perfmodel.sync_prior.physics_prior`, the
wide default slowdown) puts the network terms at a ring all-reduce of the model's gradient bytes
(its published parameter count, fp32) over the type's links (:meth:`ClusterSpec.links_of`: the
type's peer link, the node's NIC). Per (model, type): fit the 1-GPU rows, predict every
multi-GPU row, and score the posterior median's RMSLE, the 90% predictive interval's coverage
and its median width (log units), with the point fit's RMSLE beside them.

The per-type profiles are synthesised from the shipped T4 ones
(:func:`~bayes_sched.sim.synthetic_profiles.synthesise_type_profiles`, noise SD 0.05): compute
scaled per type; sync either by the ratio of peer links on rows within one node
(``--sync links``: what the physics says) or as measured on the T4s (``--sync t4``: links that do
not set the sync time, a test of the prior where the declared links are wrong). The cluster has
nodes of 4 GPUs of each type with the default topology (50 Gbit/s NIC), and may declare a type
of its own (the default list holds ``mi250x``, declared here with its vendor's figures).

Run: ``python experiments/bench_type_prior.py [--types v100 l4 mi250x] [--models bert ...]
[--steps 500] [--sync links] [--jobs 2] [--json]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bayes_sched.cluster_spec import ClusterSpec, cluster_spec_from_dict
from bayes_sched.sim.synthetic_profiles import synthesise_type_profiles
from perfmodel.allreduce import gradient_bytes
from perfmodel.datasets import POLLUX_MODELS, POLLUX_PARAMETERS
from perfmodel.sync_prior import physics_prior
from perfmodel.throughput import rmsle
from perfmodel.typed_profiles import read_typed_profiles

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.bench_perfmodel import held_out, inside  # noqa: E402
from experiments.tables import print_rows  # noqa: E402

#: A type the experiment's cluster declares: AMD Instinct MI250X (its datasheet: 47.9 TFLOPS
#: FP32 vector, 128 GB of HBM2e, PCIe Gen4 x16 to the host), the whole card as one GPU; its
#: Infinity Fabric links between cards are not assumed (PCIe Gen4: 31.5 GB/s one direction).
DECLARED = {"name": "mi250x", "memory_gib": 128, "peak_tflops": 47.9, "interconnect": "pcie",
            "link_gbytes_per_s": 31.5}
PRIORS = ("default", "physics")


def cluster_of(types: Sequence[str]) -> ClusterSpec:
    """One node of 4 GPUs of each type (default topology), declaring :data:`DECLARED`."""
    return cluster_spec_from_dict({"gpu_types": [DECLARED],
                                   "nodes": [{"gpu_type": t, "gpus": 4} for t in types]})


def one_fit(folder: str, model: str, gpu_type: str, prior_kind: str, types: tuple[str, ...],
            seed: int, num_steps: int) -> dict:
    """Fit ``model``'s 1-GPU rows on ``gpu_type`` with the prior of ``prior_kind``, score every
    multi-GPU row."""
    profile = read_typed_profiles(folder)[model][gpu_type]
    single = profile.num_replicas == 1
    train, test = profile.subset(single), profile.subset(~single)
    prior = None
    if prior_kind == "physics":
        links = cluster_of(types).links_of(gpu_type)
        prior = physics_prior(train, gradient_bytes(POLLUX_PARAMETERS[model]), links)
    pred = held_out(train, test, seed, num_steps, prior)
    truth = test.step_time
    return {"model": model, "gpu_type": gpu_type, "prior": prior_kind,
            "train_rows": len(train), "test_rows": len(test),
            "rmsle_point": rmsle(pred["point"], truth), "rmsle_bayes": rmsle(pred["median"], truth),
            "cover90": float(inside(truth, pred["q0.05"], pred["q0.95"]).mean()),
            "width90": float(np.median(np.log(pred["q0.95"] / pred["q0.05"])))}


def summarise(rows: list[dict]) -> list[dict]:
    """Per prior: means over (model, type) pairs, pairs with 90% coverage within 0.8-0.95, and
    pairs where the physics prior's median RMSLE is at most the default's."""
    out = []
    by = {(r["model"], r["gpu_type"], r["prior"]): r for r in rows}
    for kind in PRIORS:
        mine = [r for r in rows if r["prior"] == kind]
        beats = sum(r["rmsle_bayes"] <= by[r["model"], r["gpu_type"], "default"]["rmsle_bayes"]
                    for r in mine)
        out.append({"prior": kind, "pairs": len(mine),
                    "rmsle_bayes_mean": float(np.mean([r["rmsle_bayes"] for r in mine])),
                    "rmsle_point_mean": float(np.mean([r["rmsle_point"] for r in mine])),
                    "cover90_mean": float(np.mean([r["cover90"] for r in mine])),
                    "cover90_min": float(np.min([r["cover90"] for r in mine])),
                    "pairs_cover_80_95": sum(0.8 <= r["cover90"] <= 0.95 for r in mine),
                    "width90_median": float(np.median([r["width90"] for r in mine])),
                    "rmsle_at_most_default": int(beats) if kind != "default" else "-"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(POLLUX_MODELS))
    parser.add_argument("--types", nargs="+", default=["v100", "l4", "mi250x"])
    parser.add_argument("--steps", type=int, default=500, help="SVI steps per fit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sync", choices=("links", "t4"), default="links")
    parser.add_argument("--jobs", type=int, default=1, help="fits in parallel processes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    types = tuple(args.types)
    with tempfile.TemporaryDirectory() as folder:
        synthesise_type_profiles(folder, types, args.models, seed=args.seed,
                                 catalog=cluster_of(types).catalog, sync=args.sync)
        tasks = [functools.partial(one_fit, folder, m, t, k, types, args.seed, args.steps)
                 for m in args.models for t in types for k in PRIORS]
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(pool.map(_call, tasks))
    print_rows(f"Few-row fits per GPU type (1-GPU rows -> multi-GPU rows; sync {args.sync})",
               rows, args.json)
    print_rows("Summary over (model, type) pairs", summarise(rows), args.json)


def _call(task: functools.partial) -> dict:
    return task()


if __name__ == "__main__":
    main()
