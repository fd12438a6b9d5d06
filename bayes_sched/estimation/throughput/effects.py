"""The effects of our throughput learner's model (:mod:`~bayes_sched.estimation.throughput.
bayesian`): which effects a cell has, as features of what a scheduler knows at submission (model
family, batch size, scale factor, GPU type, partner, and the measured loads of a pair's place),
the normal priors of the effects that are not learned (:class:`FixedPriors`), and the starting
values of the learned variances. The learner turns these into a design and conditions on it."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bayes_sched.cells import Cell
from bayes_sched.estimation.throughput_cells import job_type_features

#: Effects with a fixed prior (:class:`FixedPriors`): levels, not learned.
FIXED_EFFECTS = ("gpu", "scale", "pair_level")
#: Effects whose variances are learned (type-II maximum likelihood), in this order.
RANDOM_EFFECTS = (
    "family", "family_gpu", "batch", "batch_gpu", "type", "type_gpu",
    "family_scale", "family_scale_gpu", "batch_scale", "batch_scale_gpu",
    "pair_family", "pair_family_gpu", "pair_batch", "pair_partner_batch",
    "pair_type", "pair_type_gpu", "pair_partner", "pair_partner_gpu",
    "pair_load", "pair_partner_load",
    "pair_level_place",
)
NUGGETS = ("solo", "pair")
_DEFAULT_LOG_VARIANCE = math.log(0.25)
#: Bounds of every learned log variance (hyperparameter fits; bo's pair learner starts the
#: effects it does not use at the lower one).
LOG_VARIANCE_BOUNDS = (-12.0, 4.0)

Feature = tuple[str, tuple[object, ...], float]


#: z of a two-sided 95% normal interval: a stated range is a prior's 95% interval.
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class FixedPriors:
    """Normal priors of the effects that are not learned, in log steps/s, stated from what a
    scheduler knows before any report (the defaults: data-parallel DL training on GPUs).

    * ``gpu`` (the level of a job of its family's average batch alone on one GPU of a type):
      training steps of DL jobs on one GPU run at ~1e-2 to 1e3 steps/s, so the prior's 95%
      interval is that span (mean ``log(10 ** 0.5)``, sd ``log(1e5) / 3.92`` = 2.94).
    * ``scale`` (per scale ``s`` and GPU type: log steps/s on ``s`` GPUs over the type's level):
      a data-parallel job's steps/s on ``s`` GPUs lies between ``1 / s`` (each step as large,
      slowed by synchronisation) and ``s`` (the global batch split ``s`` ways at no cost) times
      its one-GPU rate, and the level itself is only known to a factor 2 on one GPU: mean 0,
      95% within ``(2 s) ** +-1`` (sd ``log(2 s) / 1.96``; ``scale_sd`` sets one sd for every
      ``s``). A scale no job has run at then stays within what scaling out can do.
    * ``pair_level`` (a job's steps/s beside a partner on the same GPUs over its steps/s
      alone): two jobs sharing a GPU each get at most their alone rate, about half where
      neither fills the other's idle time: mean ``log(1/2)``, 95% within 1/8 to 2 x alone
      (sd ``log(4) / 1.96`` = 0.71).

    A cell no report has touched is predicted from these and the learned effects' variances, so
    its predictive stays inside what is physically possible (before, every level had a N(0, 25)
    prior: a first-seen scale or pair had ``exp(sigma^2 / 2)`` ~ 1e5 to 1e17 times its median).
    """

    level_mean: float = 0.5 * math.log(10.0)
    level_sd: float = math.log(1e5) / (2 * _Z95)
    scale_sd: float | None = None
    pair_mean: float = math.log(0.5)
    pair_sd: float = math.log(4.0) / _Z95

    def prior(self, name: str, key: tuple[object, ...]) -> tuple[float, float]:
        """Mean and variance of the fixed effect ``(name, key)``."""
        if name == "gpu":
            return self.level_mean, self.level_sd**2
        if name == "scale":
            s = key[0]
            assert isinstance(s, int)
            sd = math.log(2 * s) / _Z95 if self.scale_sd is None else self.scale_sd
            return 0.0, sd**2
        assert name == "pair_level", name
        return self.pair_mean, self.pair_sd**2


#: What of a :class:`FeatureContext` a cell's features read (:func:`context_key`).
ContextKey = tuple[float | None, ...]


Effect = tuple[str, tuple[object, ...]]

EFFECT_NAMES = FIXED_EFFECTS + RANDOM_EFFECTS



#: :func:`job_type_features` memoised (a regular expression per call, several per cell and fit).
type_features = functools.lru_cache(maxsize=4096)(job_type_features)


def _centred_batch(job_type: str, centre: float | None) -> tuple[str, float]:
    """The type's family and its log2 batch size less ``centre`` (0 without a batch size or a
    centre)."""
    family, batch = type_features(job_type)
    if batch is None:
        return family, 0.0
    log_batch = math.log2(batch)
    return family, log_batch - (log_batch if centre is None else centre)


@dataclass(frozen=True)
class FeatureContext:
    """What features are measured against, fixed at fit time.

    Attributes:
        centres: ``{family: mean log2 batch size of its types seen}``.
        loads: ``{(job type, scale factor, gpu type): observed mean log alone steps/s less the
            mean over types at that scale and GPU type}`` (a paired cell's covariates: how heavy
            the job and its partner are on that GPU).
    """

    centres: dict[str, float]
    loads: dict[tuple[str, int, str], float]


def cell_features(cell: Cell, context: FeatureContext) -> list[Feature]:
    """The effects a cell's log rate sums, with their multipliers (see the module docstring)."""
    return list(keyed_features(cell, context_key(cell, context)))


def context_key(cell: Cell, context: FeatureContext) -> ContextKey:
    """What of ``context`` a cell's features read: its family's batch centre and, paired, its
    partner's, its load and its partner's (``None`` where the context has none)."""
    centre = context.centres.get(type_features(cell.job_type)[0])
    if cell.partner is None:
        return (centre,)
    where = (cell.scale_factor, cell.gpu_type)
    return (centre, context.centres.get(type_features(cell.partner)[0]),
            context.loads.get((cell.job_type, *where)), context.loads.get((cell.partner, *where)))


def keyed_features(cell: Cell, key: ContextKey) -> tuple[Feature, ...]:
    """:func:`cell_features` given the cell's :func:`context_key`: the effects that do not read
    the loads (memoised per cell and batch centres), then a pair's two load effects (its key's
    loads move with every alone report at its place, so they are not part of the memo)."""
    if cell.partner is None:
        return fixed_features(cell, key)
    return fixed_features(cell, key[:2]) + load_features(cell.gpu_type, key)


def load_features(gpu: str, key: ContextKey) -> tuple[Feature, ...]:
    """A pair's load effects on ``gpu`` under its context ``key`` (those with a non-zero
    multiplier)."""
    load = 0.0 if key[2] is None else key[2]
    partner_load = 0.0 if key[3] is None else key[3]
    out = (("pair_load", (gpu,), load), ("pair_partner_load", (gpu,), partner_load))
    return tuple(f for f in out if f[2] != 0.0)


@functools.lru_cache(maxsize=1 << 16)
def fixed_features(cell: Cell, centres: ContextKey) -> tuple[Feature, ...]:
    """A cell's effects but a pair's load effects, given its (and its partner's) batch centres
    ``centres``, memoised: asked for at every prediction and fit while the centres stand."""
    j, s, g = cell.job_type, cell.scale_factor, cell.gpu_type
    fam, xb = _centred_batch(j, centres[0])
    out: list[Feature] = [
        ("gpu", (g,), 1.0), ("scale", (s, g), 1.0),
        ("family", (fam,), 1.0), ("family_gpu", (fam, g), 1.0),
        ("batch", (fam,), xb), ("batch_gpu", (fam, g), xb),
        ("type", (j,), 1.0), ("type_gpu", (j, g), 1.0)]
    if s > 1:
        out += [("family_scale", (fam, s), 1.0), ("family_scale_gpu", (fam, s, g), 1.0),
                ("batch_scale", (fam, s), xb), ("batch_scale_gpu", (fam, s, g), xb)]
    if cell.partner is not None:
        k = cell.partner
        pfam, pxb = _centred_batch(k, centres[1])
        out += [("pair_level", (), 1.0), ("pair_level_place", (s, g), 1.0),
                ("pair_family", (fam, pfam), 1.0), ("pair_family_gpu", (fam, pfam, g), 1.0),
                ("pair_batch", (fam, pfam), xb), ("pair_partner_batch", (fam, pfam), pxb),
                ("pair_type", (j,), 1.0), ("pair_type_gpu", (j, g), 1.0),
                ("pair_partner", (k,), 1.0), ("pair_partner_gpu", (k, g), 1.0)]
    return tuple(f for f in out if f[2] != 0.0)


def effect_variances(log_variances: np.ndarray) -> dict[str, float]:
    """The learned effects' variances by name."""
    return {name: float(np.exp(v)) for name, v in zip(RANDOM_EFFECTS, log_variances,
                                                       strict=False)}


def effect_prior(effect: tuple[str, tuple[object, ...]], variances: Mapping[str, float],
                  fixed: FixedPriors) -> tuple[float, float]:
    """Prior mean and variance of one effect: a fixed effect's from ``fixed``, a learned one's
    mean 0 and its variance in ``variances``."""
    name, key = effect
    return fixed.prior(name, key) if name in FIXED_EFFECTS else (0.0, variances[name])


def default_log_variances() -> np.ndarray:
    """Starting hyperparameters: every learned variance and both nuggets at 0.25 (log units^2)."""
    return np.full(len(RANDOM_EFFECTS) + len(NUGGETS), _DEFAULT_LOG_VARIANCE)


def starting_log_variances(fixed: FixedPriors) -> np.ndarray:
    """The learner's starting hyperparameters: :func:`default_log_variances`, but the learned
    paired effects and the paired nugget share ``fixed.pair_sd ** 2`` evenly. No pair variance
    is learned before a pair is reported, so until then these are the paired part's prior; at
    0.25 each its twelve terms summed to 3 beside ``pair_level``'s 0.5, and a first pair's
    predicted mean came out several times its alone rate, where a job sharing a GPU cannot beat
    its alone rate."""
    values = default_log_variances()
    paired = [i for i, name in enumerate(RANDOM_EFFECTS) if name.startswith("pair_")]
    paired.append(len(RANDOM_EFFECTS) + NUGGETS.index("pair"))
    values[paired] = math.log(fixed.pair_sd**2 / len(paired))
    return values



def batch_centre(batches: set[int]) -> float:
    """A family's batch centre: the mean log2 batch size of its types seen."""
    return float(np.mean(np.log2(sorted(batches))))
