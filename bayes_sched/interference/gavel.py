"""Gavel's measured co-locations (OSDI 2020 artifact, MIT), shipped in ``bayes_sched/data/gavel``.

26 job types (7 models at several batch sizes) trained alone and in pairs sharing one GPU, on K80,
P100 and V100. A job here is a job type on one GPU type, named ``"<gpu>/<job type>"``
(e.g. ``"v100/ResNet-50 (batch size 32)"``): the same model interferes differently on different
GPUs.
Only single-GPU jobs (scale factor 1) have co-location measurements; pairs that do not fit in the
GPU's memory (throughput 0 in the artifact) are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_sched.interference.tables import check_pairs, check_solo_features

GAVEL_DIR = Path(__file__).resolve().parent.parent / "data" / "gavel"
GPU_TYPES: tuple[str, ...] = ("k80", "p100", "v100")
#: The most a normalised speed is recorded as in the artifact: a co-located throughput at or above
#: the solo one is written as the solo one (speeds pile up at exactly 1.000, with none above and
#: none just below), so a recorded 1 is a censored value, "at least 1". A prediction of what the
#: artifact records is the model's prediction capped here.
RECORDED_SPEED_CAP = 1.0
_BATCH_SIZE = re.compile(r"batch size (\d+)")


def job_name(gpu: str, job_type: str) -> str:
    """The job name used in the pairs and solo-features tables."""
    return f"{gpu}/{job_type}"


def load_gavel_pairs(data_dir: Path = GAVEL_DIR) -> pd.DataFrame:
    """The measured pairs in the documented pairs-table format, plus ``gpu``, ``type_a``,
    ``type_b``.

    Returns one row per ordered pair the artifact lists (both orders appear; see
    :func:`bayes_sched.interference.tables.pair_observations`), 1881 rows.
    """
    raw = pd.read_csv(data_dir / "colocation_pairs_long.csv")
    feasible = raw[(raw["infeasible"] == 0) & (raw["scale_factor"] == 1)]
    pairs = pd.DataFrame(
        {
            "job_a": [
                job_name(g, t)
                for g, t in zip(feasible["worker_type"], feasible["job_a"], strict=True)
            ],
            "job_b": [
                job_name(g, t)
                for g, t in zip(feasible["worker_type"], feasible["job_b"], strict=True)
            ],
            "speed_a": feasible["norm_a"].to_numpy(float),
            "speed_b": feasible["norm_b"].to_numpy(float),
            "gpu": feasible["worker_type"].to_numpy(),
            "type_a": feasible["job_a"].to_numpy(),
            "type_b": feasible["job_b"].to_numpy(),
        }
    )
    return check_pairs(
        pairs.reset_index(drop=True), source=str(data_dir / "colocation_pairs_long.csv")
    )


#: How a job's batch size enters its solo features (:func:`load_gavel_solo_features`):
#: ``"absolute"``, its log batch size (``log_batch_size``); ``"family-relative"``, its log batch
#: size minus its family's median log batch size over the family's solo runs
#: (``log_batch_vs_family``), so that a family whose batch sizes lie outside every other family's
#: (Recommendation's 512-8192 against at most 256 elsewhere) is not an extrapolation; ``"both"``,
#: the two columns side by side.
BATCH_FEATURES: tuple[str, ...] = ("absolute", "family-relative", "both")
#: The batch feature of the loader and the benchmark when none is named.
DEFAULT_BATCH_FEATURE = "absolute"


def family_relative_log_batch(job_types: list[str]) -> dict[str, float]:
    """Job type -> its log batch size minus the median log batch size of its family's job types
    (0 for a type without a batch size).

    ``job_types`` are the types measured alone (the solo runs): the centre of a family comes from
    its own solo runs only, never from co-location measurements or other families, so a family
    held out of every co-location row still gets its value.
    """
    logs: dict[str, float] = {}
    families: dict[str, list[float]] = {}
    for job_type in job_types:
        match = _BATCH_SIZE.search(job_type)
        if match:
            logs[job_type] = float(np.log(float(match.group(1))))
            families.setdefault(job_type.split(" (", 1)[0], []).append(logs[job_type])
    return {
        t: logs[t] - float(np.median(families[t.split(" (", 1)[0]])) if t in logs else 0.0
        for t in job_types
    }


def load_gavel_solo_features(
    data_dir: Path = GAVEL_DIR, batch_feature: str = DEFAULT_BATCH_FEATURE
) -> pd.DataFrame:
    """Per-job features measured alone, indexed by job name (read from the solo throughputs
    only, ``isolated_throughputs.csv``).

    Columns (all from single-GPU throughputs in steps/s, natural logs):
    ``log_steps_per_s`` on the job's own GPU; ``log_k80_over_v100`` and ``log_p100_over_v100``, how
    much faster the job runs on a V100 (compute-bound jobs gain most); the batch size as
    ``batch_feature`` says (one of :data:`BATCH_FEATURES`): ``log_batch_size`` and/or
    ``log_batch_vs_family`` (:func:`family_relative_log_batch`), 0 where the type has no batch
    size; ``on_k80``, ``on_p100``, ``on_v100`` (0/1, the GPU the job runs on).

    Every GPU type has its own indicator, none is a reference level: with one type coded as all
    zeros, a model with a length scale per input (the GPs) would treat a held-out reference type
    as a mixture of the types it saw, and a held-out other type as one whose indicator no data
    spoke to, so the uncertainty of a GPU type no pair ran on would depend on which type was
    chosen as the reference. With one indicator each, a held-out type is new along its own
    indicator, whatever it is (the guide's advice for users' own tables: a one-hot GPU type).
    """
    if batch_feature not in BATCH_FEATURES:
        raise ValueError(f"batch_feature={batch_feature!r}; expected one of {BATCH_FEATURES}")
    iso = pd.read_csv(data_dir / "isolated_throughputs.csv")
    iso = iso[
        (iso["file"] == "simulation_throughputs.json")
        & (iso["scale_factor"] == 1)
        & iso["worker_type"].isin(GPU_TYPES)
    ]
    table = iso.pivot_table(index="job_type", columns="worker_type", values="steps_per_sec")
    log_tput = np.log(table[list(GPU_TYPES)])
    relative = family_relative_log_batch([str(t) for t in log_tput.index])
    rows = []
    for gpu in GPU_TYPES:
        for job_type, logs in log_tput.iterrows():
            match = _BATCH_SIZE.search(str(job_type))
            batch: dict[str, float] = {}
            if batch_feature != "family-relative":
                batch["log_batch_size"] = np.log(float(match.group(1))) if match else 0.0
            if batch_feature != "absolute":
                batch["log_batch_vs_family"] = relative[str(job_type)]
            rows.append(
                {
                    "job": job_name(gpu, str(job_type)),
                    "log_steps_per_s": logs[gpu],
                    "log_k80_over_v100": logs["k80"] - logs["v100"],
                    "log_p100_over_v100": logs["p100"] - logs["v100"],
                    **batch,
                    "on_k80": float(gpu == "k80"),
                    "on_p100": float(gpu == "p100"),
                    "on_v100": float(gpu == "v100"),
                }
            )
    return check_solo_features(
        pd.DataFrame(rows), source=str(data_dir / "isolated_throughputs.csv")
    )


def job_type_of(job: str) -> str:
    """The Gavel job type of a job name (the part after ``<gpu>/``)."""
    return job.split("/", 1)[1]


def family_of(job: str) -> str:
    """The model (job family) of a job name: its job type without the batch size
    (``"v100/ResNet-50 (batch size 32)"`` -> ``"ResNet-50"``)."""
    return job_type_of(job).split(" (", 1)[0]


def gpu_of(job: str) -> str:
    """The GPU type of a job name (the part before ``/``)."""
    return job.split("/", 1)[0]


def batch_size_of(job: str) -> str:
    """The batch size of a job name as written (``"32"``), ``""`` for a type without one."""
    match = _BATCH_SIZE.search(job)
    return match.group(1) if match else ""
