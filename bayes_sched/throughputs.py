"""Measured throughput tables: steps/s per job type, scale factor (GPUs) and GPU type, alone and
co-located in pairs on one GPU (Gavel's measurements, shipped in ``bayes_sched/data/gavel``).

In Gavel's model the table is a scheduler-side input ("measured throughput"): the heterogeneity-
aware policies read it, and the throughput-table simulator (:mod:`bayes_sched.sim.table_cluster`)
runs jobs at the same rates. A job is identified here by its job type (``"ResNet-50 (batch size
32)"``) and its scale factor (GPUs, 1, 2, 4 or 8).

Shapes and units: every throughput is steps per second of the whole job (all its GPUs together).
A throughput of 0 in Gavel's file means the job cannot run there (out of memory); such entries are
kept as 0 and the caller decides (the simulator refuses such a job; the mechanism never schedules
it there). A pair entry ``(a, b)`` holds job a's and job b's steps/s while sharing each GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

import pandas as pd

from bayes_sched.errors import InputError

GAVEL_DATA_DIR = Path(__file__).resolve().parent / "data" / "gavel"
SHOCKWAVE_DATA_DIR = Path(__file__).resolve().parent / "data" / "shockwave"

#: The throughput files of Gavel's artifact shipped as tidy tables (``file`` column).
THROUGHPUT_SOURCES: Mapping[str, str] = MappingProxyType({
    "simulation": "simulation_throughputs.json",
    "physical": "physical_cluster_throughputs.json",
})

JobKey = tuple[str, int]  # (job type, scale factor)


@dataclass(frozen=True)
class ThroughputTable:
    """Steps/s alone and in pairs.

    Attributes:
        solo: ``{(job type, scale factor): {gpu type: steps/s}}``.
        pairs: ``{gpu type: {((type a, sf), (type b, sf)): (steps/s of a, steps/s of b)}}``, both
            orders; only pairs of the same scale factor exist, as in Gavel.
        source: where the table was read from (for messages).
    """

    solo: Mapping[JobKey, Mapping[str, float]]
    pairs: Mapping[str, Mapping[tuple[JobKey, JobKey], tuple[float, float]]]
    source: str = ""

    @property
    def job_types(self) -> tuple[str, ...]:
        """Every job type with a measurement, in first-seen order."""
        return tuple(dict.fromkeys(job_type for job_type, _ in self.solo))

    def gpu_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g for rates in self.solo.values() for g in rates))

    def steps_per_second(self, job_type: str, scale_factor: int, gpu: str) -> float | None:
        """Steps/s of a job alone on ``scale_factor`` GPUs of type ``gpu``; ``None`` where the
        table has no entry (unknown job type, scale factor or GPU type)."""
        rates = self.solo.get((job_type, int(scale_factor)))
        if rates is None:
            return None
        return rates.get(gpu)

    def pair_steps_per_second(self, gpu: str, a: JobKey, b: JobKey) -> tuple[float, float] | None:
        """Steps/s of jobs ``a`` and ``b`` sharing each of their GPUs of type ``gpu``; ``None``
        where the pair was not measured (different scale factors, unknown types)."""
        return self.pairs.get(gpu, {}).get((a, b))


@cache
def load_gavel_throughputs(source: str = "simulation", data_dir: Path = GAVEL_DATA_DIR
                           ) -> ThroughputTable:
    """Gavel's measured throughput table (``"simulation"``: the file Gavel's simulator reads;
    ``"physical"``: its physical-cluster measurements) on K80, P100 and V100 (the consolidated
    placements; Gavel's ``*_unconsolidated`` entries are left out)."""
    if source not in THROUGHPUT_SOURCES:
        raise InputError(f"unknown throughput table '{source}': expected one of "
                         f"{', '.join(THROUGHPUT_SOURCES)}, tacc")
    iso_path = data_dir / "isolated_throughputs.csv"
    iso = pd.read_csv(iso_path)
    iso = iso[(iso["file"] == THROUGHPUT_SOURCES[source])
              & ~iso["worker_type"].str.endswith("_unconsolidated")]
    solo: dict[JobKey, dict[str, float]] = {}
    for gpu, job_type, sf, rate in zip(iso["worker_type"], iso["job_type"], iso["scale_factor"],
                                       iso["steps_per_sec"], strict=True):
        solo.setdefault((str(job_type), int(sf)), {})[str(gpu)] = float(rate)
    pairs: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
    if source == "simulation":  # the pairs table was derived from the simulation file
        raw = pd.read_csv(data_dir / "colocation_pairs_long.csv")
        for gpu, a, sf, b, ra, rb, bad in zip(raw["worker_type"], raw["job_a"],
                                              raw["scale_factor"], raw["job_b"],
                                              raw["coloc_tput_a"], raw["coloc_tput_b"],
                                              raw["infeasible"], strict=True):
            rates = (0.0, 0.0) if bad else (float(ra), float(rb))
            key_a, key_b = (str(a), int(sf)), (str(b), int(sf))
            table = pairs.setdefault(str(gpu), {})
            table[(key_a, key_b)] = rates
            table[(key_b, key_a)] = (rates[1], rates[0])
    return ThroughputTable(
        solo=MappingProxyType({k: MappingProxyType(v) for k, v in solo.items()}),
        pairs=MappingProxyType({g: MappingProxyType(v) for g, v in pairs.items()}),
        source=str(iso_path))


@cache
def load_shockwave_throughputs(data_dir: Path = SHOCKWAVE_DATA_DIR) -> ThroughputTable:
    """Shockwave's re-measured table (``scheduler/tacc_throughputs.json`` of its artifact, in
    Gavel's schema): steps/s alone on K80, P100 and V100 for 83 (job type, scale factor) keys,
    batch sizes up to each model's largest. Only the alone throughputs are shipped (no pairs:
    Shockwave's runs do not pack jobs)."""
    path = data_dir / "tacc_throughputs.csv"
    raw = pd.read_csv(path)
    solo: dict[JobKey, dict[str, float]] = {}
    for gpu, job_type, sf, rate in zip(raw["worker_type"], raw["job_type"], raw["scale_factor"],
                                       raw["steps_per_sec"], strict=True):
        solo.setdefault((str(job_type), int(sf)), {})[str(gpu)] = float(rate)
    return ThroughputTable(
        solo=MappingProxyType({k: MappingProxyType(v) for k, v in solo.items()}),
        pairs=MappingProxyType({}), source=str(path))


def load_throughputs(source: str = "simulation") -> ThroughputTable:
    """A shipped table by name: Gavel's ``"simulation"`` or ``"physical"``, Shockwave's
    ``"tacc"``."""
    if source == "tacc":
        return load_shockwave_throughputs()
    return load_gavel_throughputs(source)


@cache
def gavel_job_types(data_dir: Path = GAVEL_DATA_DIR) -> tuple[tuple[str, bool], ...]:
    """Gavel's job-type table in its order (``scheduler/job_table.py``): ``(job type, whether
    it can run on several GPUs)``; the continuous-arrival generator draws from it."""
    table = pd.read_csv(data_dir / "job_types.csv")
    return tuple((str(t), bool(d)) for t, d in zip(table["job_type"], table["distributed"],
                                                   strict=True))
