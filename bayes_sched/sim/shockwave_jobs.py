"""Jobs of Shockwave's world: 12-column traces with batch-size modes and each model's schedule.

Shockwave (Zheng et al., NSDI 2023; artifact ``uw-mad-dash/shockwave``) extends Gavel's job with a
batch-size adaptation mode and a nominal duration. A trace line has 12 tab-separated columns
(:data:`SHOCKWAVE_TRACE_COLUMNS`): Gavel's first seven, then ``mode`` (``static``, ``accordion`` or
``gns``), ``priority_weight``, ``SLO``, ``duration`` (seconds alone on a V100 at the initial batch
size) and ``arrival_time`` (s).

Epochs as Shockwave counts them (``scheduler.py`` ``_get_num_epochs``, ``utils.py``
``generate_pickle_file``): an epoch is ``ceil(dataset / batch size)`` iterations of the model's
dataset (:data:`DATASET_SIZE`); a job trains ``ceil(total_steps / iterations per epoch)`` epochs at
its initial batch size, and keeps that number of epochs when its batch size changes.

Batch-size schedules (one per mode; our transcription of the rules in Shockwave's ``utils.py``):

* ``static``: the initial batch size every epoch.
* ``accordion`` (:func:`accordion_schedule`): in a model's *critical regimes* (epoch ranges where
  Accordion keeps the small batch) the initial batch size, elsewhere the model's largest
  (:data:`MAX_BATCH_SIZE`), and never before 30 % of the epochs. Transformer does not adapt.
* ``gns`` (:func:`gns_schedule`): the gradient-noise-scale rule as Shockwave tabulated it per
  (model, initial batch size, GPUs): the batch size doubles at given epochs (:data:`GNS_SEGMENTS`),
  capped at the model's limit. Shockwave's loops leave the last epoch at the initial size once a
  second segment starts; that is kept, since it defines the profile Shockwave plans with.

:mod:`bayes_sched.sim.shockwave_cluster` runs these jobs (how the batch size changes while a job
runs follows Shockwave's simulator, which differs from these profiles in places; see there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from bayes_sched.errors import InputError
from bayes_sched.sim.gavel_jobs import MAX_SCALE_FACTOR, TableJobSpec
from bayes_sched.throughputs import SHOCKWAVE_DATA_DIR, ThroughputTable, load_shockwave_throughputs
from perfmodel import textio

#: Columns of a Shockwave trace line, in order.
SHOCKWAVE_TRACE_COLUMNS: tuple[str, ...] = (
    "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
    "scale_factor", "mode", "priority_weight", "SLO", "duration", "arrival_time")

#: Batch-size adaptation modes.
MODES: tuple[str, ...] = ("static", "accordion", "gns")

#: Examples per epoch of each model's dataset (Shockwave's ``dataset_size_dict``).
DATASET_SIZE: Mapping[str, int] = MappingProxyType({
    "ResNet-18": 50000, "ResNet-50": 100000, "Transformer": 10000, "LM": 59675,
    "Recommendation": 117907, "CycleGAN": 6287, "A3C": 4})

#: Largest batch size a model adapts to (Accordion's target; GNS's cap where it adapts).
MAX_BATCH_SIZE: Mapping[str, int] = MappingProxyType({
    "LM": 80, "ResNet-18": 256, "ResNet-50": 128, "Recommendation": 8192})

#: GNS's cap per model (Shockwave's ``bs_limit``; Transformer does not adapt under GNS).
GNS_LIMIT: Mapping[str, int] = MappingProxyType({
    "ResNet-18": 256, "ResNet-50": 128, "Transformer": 128, "LM": 80, "Recommendation": 8192})

#: Smallest batch size per model (Accordion never goes below it).
MIN_BATCH_SIZE: Mapping[str, int] = MappingProxyType({
    "ResNet-18": 16, "ResNet-50": 16, "Transformer": 16, "LM": 5, "Recommendation": 512})

#: GNS's schedule per (model, initial batch size, GPUs): ``(first epoch, multiplier)`` per
#: segment, each segment running to the next one's first epoch (the last to the end). A job
#: adapts only when it has more epochs than the first segment's first epoch.
GNS_SEGMENTS: Mapping[tuple[str, int, int], tuple[tuple[int, int], ...]] = MappingProxyType({
    ("ResNet-18", 16, 1): ((31, 2), (41, 4), (51, 8), (71, 16)),
    ("ResNet-18", 32, 1): ((21, 2), (31, 4), (51, 8)),
    ("ResNet-18", 64, 1): ((11, 2), (31, 4)),
    ("ResNet-18", 128, 1): ((11, 2),),
    ("ResNet-18", 16, 2): ((21, 2), (31, 4), (91, 8), (111, 16)),
    ("ResNet-18", 32, 2): ((11, 2), (21, 4), (41, 8)),
    ("ResNet-18", 64, 2): ((21, 2), (41, 4)),
    ("ResNet-18", 128, 2): ((41, 2),),
    ("ResNet-18", 16, 4): ((11, 2), (21, 4), (81, 8), (91, 16)),
    ("ResNet-18", 32, 4): ((21, 2), (31, 4), (61, 8)),
    ("ResNet-18", 64, 4): ((11, 2), (61, 4)),
    ("ResNet-18", 128, 4): ((11, 2),),
    ("ResNet-50", 64, 1): ((101, 2),),
    ("ResNet-50", 32, 2): ((101, 2), (111, 4)),
    ("ResNet-50", 64, 2): ((81, 2),),
    ("ResNet-50", 32, 4): ((131, 2), (221, 4)),
    ("ResNet-50", 64, 4): ((191, 2),),
    ("LM", 5, 1): ((31, 2), (41, 4), (61, 8), (71, 16)),
    ("LM", 10, 1): ((11, 2), (21, 4), (41, 8)),
    ("LM", 20, 1): ((11, 2), (41, 4)),
    ("LM", 40, 1): ((11, 2),),
    ("LM", 5, 2): ((31, 2), (51, 4), (61, 8), (71, 16)),
    ("LM", 10, 2): ((11, 2), (31, 4), (41, 8)),
    ("LM", 20, 2): ((31, 2), (41, 4)),
    ("LM", 40, 2): ((11, 2),),
    ("LM", 5, 4): ((11, 2), (31, 4), (71, 8), (91, 16)),
    ("LM", 10, 4): ((11, 2), (31, 4), (61, 8)),
    ("LM", 20, 4): ((11, 2), (61, 4)),
    ("LM", 40, 4): ((61, 2),),
    ("Recommendation", 512, 1): ((21, 2), (41, 4), (71, 8), (91, 16)),
    ("Recommendation", 1024, 1): ((21, 2), (51, 4), (91, 8)),
    ("Recommendation", 2048, 1): ((21, 2), (41, 4)),
    ("Recommendation", 4096, 1): ((41, 2),),
})


def model_of(job_type: str) -> str:
    """The model of a job type: ``"ResNet-18 (batch size 32)"`` -> ``"ResNet-18"``."""
    return job_type.split(" ", 1)[0]


def job_type_of(model: str, batch_size: int) -> str:
    return f"{model} (batch size {batch_size})"


def iterations_per_epoch(model: str, batch_size: int) -> int:
    return math.ceil(DATASET_SIZE[model] / batch_size)


def num_epochs(model: str, batch_size: int, steps: float) -> int:
    """Epochs of ``steps`` iterations at ``batch_size`` (Shockwave rounds up)."""
    return math.ceil(steps / iterations_per_epoch(model, batch_size))


def accordion_critical(model: str, initial_batch_size: int, epoch: int) -> bool:
    """Whether ``epoch`` is in one of Accordion's critical regimes in the job's profile."""
    if model == "ResNet-18":
        head = 20 if initial_batch_size == 256 else 10
        return epoch < head or 150 <= epoch < 160 or 250 <= epoch < 260
    if model == "ResNet-50":
        return epoch < 600 and epoch % 30 < 10
    if model == "LM":
        return epoch < 10
    if model == "Recommendation":
        head = {512: 30, 1024: 30, 2048: 40}.get(initial_batch_size, 10)
        return epoch < head or 60 <= epoch < 70 or 80 <= epoch < 90
    return True  # models Accordion does not adapt


def accordion_schedule(model: str, initial_batch_size: int, epochs: int) -> list[int]:
    """Batch size per epoch under Accordion (the profile Shockwave plans with)."""
    largest = MAX_BATCH_SIZE.get(model, initial_batch_size)
    if model not in MAX_BATCH_SIZE:
        return [initial_batch_size] * epochs
    return [largest if not accordion_critical(model, initial_batch_size, e) and e > 0.3 * epochs
            else initial_batch_size for e in range(epochs)]


def gns_schedule(model: str, initial_batch_size: int, epochs: int, scale_factor: int
                 ) -> list[int]:
    """Batch size per epoch under GNS, as Shockwave tabulates it (see :data:`GNS_SEGMENTS`)."""
    schedule = [initial_batch_size] * epochs
    segments = GNS_SEGMENTS.get((model, initial_batch_size, scale_factor), ())
    if not segments or epochs <= segments[0][0]:
        return schedule
    bounds = [start for start, _ in segments[1:]] + [epochs]
    for i, ((start, multiplier), end) in enumerate(zip(segments, bounds, strict=True)):
        # The first segment reaches the last epoch; later ones stop one short of it (the order
        # of Shockwave's bound check and assignment differs between its first and later loops).
        stop = min(end, epochs if i == 0 else epochs - 1)
        for epoch in range(start, stop):
            schedule[epoch] = initial_batch_size * multiplier
    cap = GNS_LIMIT.get(model)
    return schedule if cap is None else [min(b, cap) for b in schedule]


def batch_size_schedule(mode: str, model: str, initial_batch_size: int, epochs: int,
                        scale_factor: int) -> list[int]:
    """The job's batch size per epoch under its mode."""
    if mode == "accordion":
        return accordion_schedule(model, initial_batch_size, epochs)
    if mode == "gns":
        return gns_schedule(model, initial_batch_size, epochs, scale_factor)
    return [initial_batch_size] * epochs


@dataclass(frozen=True)
class ShockwaveJobSpec(TableJobSpec):
    """A Shockwave job: a Gavel job with a batch-size mode and a nominal duration.

    Attributes:
        mode: ``static``, ``accordion`` or ``gns`` (declared by the user at submission).
        duration: seconds alone on a V100 at the initial batch size (the trace's column).
    """

    mode: str = "static"
    duration: float = 0.0

    @property
    def model(self) -> str:
        return model_of(self.job_type)

    @property
    def epochs(self) -> int:
        """Epochs to train (the user's target, kept across batch-size changes)."""
        return num_epochs(self.model, self.batch_size, self.total_steps)

    def profile(self) -> list[int]:
        """Batch size per epoch under the job's mode."""
        return batch_size_schedule(self.mode, self.model, self.batch_size, self.epochs,
                                   self.scale_factor)


def epoch_seconds(table: ThroughputTable, model: str, batch_size: int, scale_factor: int,
                  gpu: str = "v100") -> float | None:
    """Seconds of one epoch at ``batch_size`` on ``scale_factor`` GPUs of type ``gpu``
    (Shockwave's ``get_metric(..., "duration")``: dataset / batch size iterations, not rounded);
    ``None`` where the table has no positive rate."""
    rate = table.steps_per_second(job_type_of(model, batch_size), scale_factor, gpu)
    if not rate:
        return None
    return DATASET_SIZE[model] / batch_size / rate


def profile_epoch_seconds(job: ShockwaveJobSpec, table: ThroughputTable, gpu: str = "v100"
                          ) -> list[float]:
    """Seconds of each epoch of the job's profile alone on its GPUs of type ``gpu``."""
    out = []
    for batch_size in job.profile():
        seconds = epoch_seconds(table, job.model, batch_size, job.scale_factor, gpu)
        out.append(float("inf") if seconds is None else seconds)
    return out


def read_shockwave_trace(path: str | Path, table: ThroughputTable | None = None
                         ) -> tuple[ShockwaveJobSpec, ...]:
    """Read and check a 12-column Shockwave trace; jobs are named by their line index.

    Raises:
        InputError: one line naming the file, row and column of the first problem: a wrong number
            of columns, a bad number, an unknown mode, a model without a dataset size, a job type /
            scale factor with no measured throughput (also for a batch size its mode reaches),
            arrival times that go back in time, an empty file.
    """
    table = table or load_shockwave_throughputs()
    path = Path(path)
    text = textio.read_text(path, InputError)
    parsers = {
        "needs_data_dir": textio.int_parser(0, 1),
        "total_steps": textio.float_parser(0.0, 1e15, above_minimum=True),
        "scale_factor": textio.int_parser(1, MAX_SCALE_FACTOR),
        "priority_weight": textio.float_parser(0.0, 1e6, above_minimum=True),
        "SLO": textio.float_parser(),
        "duration": textio.float_parser(0.0, 1e12),
        "arrival_time": textio.float_parser(0.0, 1e12),
    }
    jobs: list[ShockwaveJobSpec] = []
    previous = 0.0
    for row, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(SHOCKWAVE_TRACE_COLUMNS):
            raise InputError(f"{len(fields)} tab-separated columns: expected "
                             f"{len(SHOCKWAVE_TRACE_COLUMNS)} "
                             f"({', '.join(SHOCKWAVE_TRACE_COLUMNS)})", path, row)
        values = {column: textio.parse_cell(fields[SHOCKWAVE_TRACE_COLUMNS.index(column)], parse,
                                            path, row, column, InputError)
                  for column, parse in parsers.items()}
        job_type, mode = fields[0].strip(), fields[7].strip()
        model = model_of(job_type)
        if model not in DATASET_SIZE:
            raise InputError(f"unknown model in job type '{job_type}': expected one of "
                             f"{', '.join(DATASET_SIZE)}", path, row, "job_type")
        if mode not in MODES:
            raise InputError(f"unknown batch-size mode '{mode}': expected one of "
                             f"{', '.join(MODES)}", path, row, "mode")
        scale_factor = int(values["scale_factor"])
        arrival = float(values["arrival_time"])
        job = ShockwaveJobSpec(str(len(jobs)), arrival, job_type, scale_factor,
                               _initial_batch_size(job_type, path, row),
                               float(values["total_steps"]), float(values["priority_weight"]),
                               mode, float(values["duration"]))
        for batch_size in sorted(set(job.profile())):
            if table.steps_per_second(job_type_of(model, batch_size), scale_factor, "v100") \
                    is None:
                raise InputError(
                    f"job type '{job_type_of(model, batch_size)}' (mode {mode}) has no measured "
                    f"throughput at scale factor {scale_factor}: expected a (job type, scale "
                    "factor) of the throughput table", path, row,
                    "job_type" if batch_size == job.batch_size else "mode")
        if arrival < previous:
            raise InputError(f"arrival time {arrival:g} is before the previous job's "
                             f"{previous:g}: expected non-decreasing arrival times", path, row,
                             "arrival_time")
        previous = arrival
        jobs.append(job)
    if not jobs:
        raise InputError("no jobs: expected one tab-separated line per job", path)
    return tuple(jobs)


def _initial_batch_size(job_type: str, path: Path, row: int) -> int:
    marker = "(batch size "
    start = job_type.find(marker)
    digits = job_type[start + len(marker):].rstrip(")") if start >= 0 else ""
    if not digits.isdigit() or int(digits) <= 0:
        raise InputError(f"job type '{job_type}' names no batch size: expected "
                         "'<model> (batch size <n>)'", path, row, "job_type")
    return int(digits)


def shipped_shockwave_trace(name: str = "tacc_120") -> Path:
    """A trace shipped from Shockwave's ``scheduler/traces/reproduce`` (``tacc_120``: the
    120-job trace of its ``tacc_32gpus`` runs)."""
    path = SHOCKWAVE_DATA_DIR / "traces" / f"{Path(name).stem}.trace"
    if not path.exists():
        raise InputError(f"no such Shockwave trace '{name}': expected one of "
                         f"{', '.join(shipped_shockwave_traces())}")
    return path


def shipped_shockwave_traces() -> Sequence[str]:
    return sorted(p.stem for p in (SHOCKWAVE_DATA_DIR / "traces").glob("*.trace"))


def is_shockwave_trace(path: Path) -> bool:
    """Whether a trace file's first line has Shockwave's 12 columns (else Gavel's 10)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
    except OSError:
        return False
    return len(first.rstrip("\n").split("\t")) == len(SHOCKWAVE_TRACE_COLUMNS)
