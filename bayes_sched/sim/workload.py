"""Workloads: job arrival traces in the Pollux artifact's CSV format.

A workload CSV has the columns ``name,time,application,num_replicas,batch_size``: one row per job,
with its submission time (seconds from the start), the model it trains (one of the shipped
applications), and the GPUs and total batch size its user asked for (used by the baselines that do
not tune them). An optional ``tenant`` column names the team that submitted each job (empty or
absent: :data:`~bayes_sched.jobs.DEFAULT_TENANT`). The artifact's workloads ship in
``bayes_sched/data/pollux/workloads*/``.
:func:`generate_workload` draws longer ones as they were drawn (``experiments/generate_workload.py``).
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.jobs import DEFAULT_TENANT, JobSpec
from perfmodel import textio

WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
#: The optional column naming each job's tenant.
TENANT_COLUMN = "tenant"
#: Folders of shipped workloads: relative job load 1.0 (``workloads``), 0.5, 1.5, 2.0, realistic.
WORKLOAD_SETS = ("workloads", "workloads-0.5", "workloads-1.5", "workloads-2.0",
                 "workloads-realistic")


@dataclass(frozen=True)
class Workload:
    """A named sequence of jobs sorted by submission time.

    ``skipped``: the applications of the rows :func:`read_workload` dropped as unknown (one per
    row, with ``skip_unknown``).
    """

    name: str
    jobs: tuple[JobSpec, ...]
    source: str = ""
    skipped: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.jobs)

    def head(self, num_jobs: int) -> Workload:
        """The first ``num_jobs`` jobs (a small slice for tests and demos)."""
        return Workload(f"{self.name}-first{num_jobs}", self.jobs[:num_jobs], self.source,
                        self.skipped)


def shipped_workloads_dir(workload_set: str = "workloads") -> Path:
    """Folder of one shipped set of workloads (see :data:`WORKLOAD_SETS`)."""
    if workload_set not in WORKLOAD_SETS:
        raise InputError(f"unknown workload set '{workload_set}': expected one of "
                         f"{', '.join(WORKLOAD_SETS)}")
    return Path(str(resources.files("bayes_sched") / "data" / "pollux" / workload_set))


def resolve_workload(spec: str | Path) -> Path:
    """A workload CSV from a path, or a shipped workload named ``workload-3``, ``3`` or
    ``workloads-2.0/workload-3``."""
    path = Path(spec)
    if path.suffix == ".csv" or path.exists():
        return path
    text = str(spec)
    workload_set, _, name = text.rpartition("/")
    workload_set = workload_set or "workloads"
    if name.isdigit():
        name = f"workload-{name}"
    candidate = shipped_workloads_dir(workload_set) / f"{name}.csv"
    if not candidate.exists():
        raise InputError(f"no such workload '{text}': expected a CSV path or a shipped name like "
                         "'workload-1' or 'workloads-2.0/workload-1'")
    return candidate


def read_workload(path: str | Path, applications: Sequence[str] | None = None,
                  skip_unknown: bool = False, max_jobs: int | None = None) -> Workload:
    """Read and validate a workload CSV, streamed row by row.

    Args:
        path: the CSV file (or a shipped name, see :func:`resolve_workload`).
        applications: known application names; defaults to the shipped ones and those
            registered (:func:`~bayes_sched.sim.physics.register_profiles`).
        skip_unknown: drop the rows of unknown applications (listed in ``Workload.skipped``)
            instead of refusing the workload.
        max_jobs: stop once this many jobs are read (the rows after them are not read, nor
            checked); ``None``: every row.

    Raises:
        InputError: naming file, row and column of the first problem (unknown application, a
            negative or decreasing time, a non-integer or non-positive replica count or batch size,
            a duplicate name, a missing column).
    """
    from bayes_sched.sim.physics import known_applications

    known = tuple(applications) if applications is not None else known_applications()
    path = resolve_workload(path)
    rows = textio.iter_csv(path, InputError)
    _, header = next(rows)
    textio.CsvTable(path, header, ()).require(WORKLOAD_COLUMNS, InputError)
    parsers: dict[str, Callable[[str], Any]] = {
        "name": str,
        "time": textio.float_parser(),
        "application": str,
        "num_replicas": textio.int_parser(1, textio.MAX_GPUS),
        "batch_size": textio.int_parser(1, textio.MAX_BATCH),
    }
    index = {column: header.index(column) for column in parsers}
    tenant_at = header.index(TENANT_COLUMN) if TENANT_COLUMN in header else None
    jobs: list[JobSpec] = []
    names: set[str] = set()
    previous_time = 0.0
    skipped: list[str] = []
    for row_number, fields in rows:
        if max_jobs is not None and len(jobs) >= max_jobs:
            break
        cells = {column: textio.parse_cell(fields[index[column]], parse, path, row_number,
                                           column, InputError)
                 for column, parse in parsers.items()}
        name, time, application = cells["name"], cells["time"], cells["application"]
        if name in names:
            raise InputError(f"duplicate job name '{name}': expected unique names", path,
                             row_number, "name")
        names.add(name)
        if time < 0:
            raise InputError(f"negative time {time:g}: expected seconds >= 0", path, row_number,
                             "time")
        if time < previous_time:
            raise InputError(f"time {time:g} is before the previous row's {previous_time:g}: "
                             "expected rows sorted by submission time", path, row_number, "time")
        previous_time = time
        if application not in known and skip_unknown:
            skipped.append(application)
            continue
        if application not in known:
            raise InputError(f"unknown application '{application}': expected one of "
                             f"{', '.join(known)}", path, row_number, "application")
        tenant = (fields[tenant_at].strip() if tenant_at is not None else "") or DEFAULT_TENANT
        jobs.append(JobSpec(name, time, application, cells["num_replicas"],
                            cells["batch_size"], tenant=tenant))
    if not jobs:
        dropped = f" once {len(skipped)} rows of unknown applications were dropped" \
            if skipped else " after the header"
        raise InputError(f"no jobs{dropped}", path)
    return Workload(path.stem, tuple(jobs), str(path), tuple(skipped))


#: The span of one shipped workload: the artifact sampled each from an 8-hour interval of the
#: Microsoft Philly trace (every shipped submission time is below 8 h).
SHIPPED_WINDOW_SECONDS = 8 * 3600


def generate_workload(num_jobs: int, hours: int, seed: int = 0,
                      workload_set: str = "workloads") -> Workload:
    """A longer workload drawn as the shipped ones are: ``hours`` (a multiple of 8) of 8-hour
    windows, each with an equal share of ``num_jobs`` (960 jobs in 48 h: 160 per window, the
    shipped density).

    Each job is one row drawn uniformly, with replacement, from the pooled rows of the shipped
    set's workloads (1-8 of ``workload_set``): its application, GPUs and batch size together (the
    shipped joint mix), and its submission time within its window (the shipped arrival profile
    over the busy interval the artifact sampled). Jobs are named ``{application}-{index}`` in
    submission order, as the shipped ones are. ``seed`` seeds the draws (numpy's PCG64).

    Raises:
        InputError: ``hours`` not a positive multiple of 8, or ``num_jobs`` below 1.
    """
    window_hours = SHIPPED_WINDOW_SECONDS // 3600
    if hours < window_hours or hours % window_hours:
        raise InputError(f"hours is {hours}: expected a positive multiple of {window_hours}")
    if num_jobs < 1:
        raise InputError(f"num_jobs is {num_jobs}: expected at least 1")
    folder = shipped_workloads_dir(workload_set)
    pool = [job for i in range(1, 9) for job in read_workload(folder / f"workload-{i}.csv").jobs]
    rng = np.random.default_rng(seed)
    windows = hours // window_hours
    per_window = np.diff(np.linspace(0, num_jobs, windows + 1).round().astype(np.int64))
    window = np.repeat(np.arange(windows), per_window.tolist())
    rows = rng.integers(len(pool), size=num_jobs)
    times = window * SHIPPED_WINDOW_SECONDS + np.array([pool[r].submit_time for r in rows])
    order = np.argsort(times, kind="stable")
    jobs = []
    for index, k in enumerate(order.tolist()):
        drawn = pool[int(rows[k])]
        jobs.append(JobSpec(f"{drawn.application}-{index}", float(times[k]), drawn.application,
                            drawn.num_replicas, drawn.batch_size))
    return Workload(f"generated-{num_jobs}jobs-{hours}h-seed{seed}", tuple(jobs))


def write_workload(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` as a workload CSV (:data:`WORKLOAD_COLUMNS`, and
    :data:`TENANT_COLUMN` where a job names a tenant other than the default), atomically: the
    file is whole or absent, also when the process is killed."""
    path = Path(path)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    tenants = any(job.tenant != DEFAULT_TENANT for job in workload.jobs)
    writer.writerow(WORKLOAD_COLUMNS + ((TENANT_COLUMN,) if tenants else ()))
    for job in workload.jobs:
        writer.writerow([job.name, f"{job.submit_time:g}", job.application, job.num_replicas,
                         job.batch_size] + ([job.tenant] if tenants else []))
    fd, temp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(buffer.getvalue())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
