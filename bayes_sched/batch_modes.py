"""Batch-size adaptation rules of Shockwave's jobs: epochs, and each mode's schedule per model.

Public knowledge a scheduler may use (a job declares its model, initial batch size, GPUs, mode and
epochs at submission, as in Shockwave): our transcription of the rules in Shockwave's ``utils.py``
(``get_accordion_bs_pattern``, ``get_gns_bs_pattern``, ``get_metric``) and ``scheduler.py``
(``dataset_size_dict``, ``_get_num_epochs``), artifact ``uw-mad-dash/shockwave``.

Epochs as Shockwave counts them: an epoch is ``ceil(dataset / batch size)`` iterations of the
model's dataset (:data:`DATASET_SIZE`); a job trains ``ceil(total_steps / iterations per epoch)``
epochs at its initial batch size and keeps that number of epochs when its batch size changes.

Schedules (batch size per epoch, the profile Shockwave plans with):

* ``static``: the initial batch size every epoch.
* ``accordion`` (:func:`accordion_schedule`): in a model's *critical regimes* (epoch ranges where
  Accordion keeps the small batch) the initial batch size, elsewhere the model's largest
  (:data:`MAX_BATCH_SIZE`), and never before 30 % of the epochs. Transformer does not adapt.
* ``gns`` (:func:`gns_schedule`): the gradient-noise-scale rule as Shockwave tabulated it per
  (model, initial batch size, GPUs): the batch size doubles at given epochs (:data:`GNS_SEGMENTS`),
  capped at the model's limit. Shockwave's loops leave the last epoch at the initial size once a
  second segment starts; that is kept, since it defines the profile Shockwave plans with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol


class SoloRates(Protocol):
    """Anything that answers a job's steps/s alone (a :class:`~bayes_sched.throughputs.ThroughputTable`,
    or an estimate of one): the rules here read rates, never where they come from."""

    def steps_per_second(self, job_type: str, scale_factor: int, gpu: str) -> float | None: ...

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


def epoch_seconds(table: SoloRates, model: str, batch_size: int, scale_factor: int,
                  gpu: str = "v100") -> float | None:
    """Seconds of one epoch at ``batch_size`` on ``scale_factor`` GPUs of type ``gpu``
    (Shockwave's ``get_metric(..., "duration")``: dataset / batch size iterations, not rounded);
    ``None`` where the table has no positive rate."""
    rate = table.steps_per_second(job_type_of(model, batch_size), scale_factor, gpu)
    if not rate:
        return None
    return DATASET_SIZE[model] / batch_size / rate
