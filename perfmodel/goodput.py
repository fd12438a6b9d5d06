"""Goodput (throughput x statistical efficiency) and batch-size tuning, vectorised over allocations.

Goodput is progress per second in examples at the initial batch size. Given an allocation (nodes
and GPUs), :meth:`GoodputModel.optimize` picks the per-GPU micro-batch ``m`` and accumulation steps
``s`` that maximise goodput (its posterior mean or a lower quantile) under a maximum total batch and a
per-GPU memory limit on ``m``. Candidates are a geometric grid of total batch sizes; for each, the
fewest accumulation steps that keep ``m`` within the memory limit (more micro-steps only add
per-step overhead).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.efficiency import efficiency_from_noise
from perfmodel.throughput import ThroughputParams, step_time_terms, total_batch

# Bound on S x A x G elements evaluated at once, to keep memory flat for many allocations.
_CHUNK_ELEMENTS = 2_000_000

#: Candidate total batch sizes per allocation that :meth:`GoodputModel.optimize` scores (a
#: geometric grid between the smallest and the largest total batch).
BATCH_GRID_SIZE = 48


@dataclass(frozen=True)
class BatchChoice:
    """The best batch configuration per allocation; arrays of shape ``(A,)``.

    ``goodput`` is in examples (at the initial batch size) per second, 0 where no configuration is
    feasible (then ``local_bsz``, ``accum_steps`` and ``batch_size`` are 0).
    """

    goodput: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    batch_size: np.ndarray


class GoodputModel:
    """Goodput of one job, from throughput parameters and its gradient noise.

    Args:
        params: a point estimate, or posterior draws of shape ``(S, 7)`` in ``PARAM_NAMES`` order,
            or ``(S, 9)`` in ``DRAW_NAMES`` order (with the multi-GPU compute shifts, as
            :attr:`~perfmodel.throughput_bayes.posterior.ThroughputPosterior.draws`).
        grad_sqr, grad_var: gradient statistics at ``init_bsz`` (scalars or draws of shape ``(S,)``).
        init_bsz: the initial (reference) total batch size, examples.
    """

    def __init__(self, params: ThroughputParams | np.ndarray, grad_sqr: float | np.ndarray,
                 grad_var: float | np.ndarray, init_bsz: int) -> None:
        theta = params.as_array() if isinstance(params, ThroughputParams) else params
        self.theta = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        sqr = np.asarray(grad_sqr, dtype=np.float64)
        var = np.asarray(grad_var, dtype=np.float64)
        self.noise_to_signal = np.atleast_1d(var / np.maximum(sqr, np.finfo(float).tiny))
        self.init_bsz = int(init_bsz)

    @classmethod
    def from_noise_to_signal(cls, params: ThroughputParams | np.ndarray,
                             noise_to_signal: float | np.ndarray, init_bsz: int) -> GoodputModel:
        """Build from ``phi = grad_var / grad_sqr`` (a scalar or draws of shape ``(S,)``)."""
        return cls(params, 1.0, noise_to_signal, init_bsz)

    @property
    def num_samples(self) -> int:
        return max(self.theta.shape[0], self.noise_to_signal.shape[0])

    def _samples(self, *configs: np.ndarray) -> tuple[np.ndarray, ...]:
        # Parameters get trailing singleton axes so draws (S) broadcast against configs.
        extra = (None,) * np.broadcast(*configs).ndim
        theta = self.theta[(slice(None), *extra, slice(None))]
        phi = self.noise_to_signal[(slice(None), *extra)]
        return theta, phi

    def throughput(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                   local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0) -> np.ndarray:
        """Examples per second, shape ``(S, *config_shape)``."""
        nodes, replicas, m, s = (np.asarray(a, dtype=np.float64)
                                 for a in (num_nodes, num_replicas, local_bsz, accum_steps))
        theta, _ = self._samples(nodes, replicas, m, s)
        return _examples_per_second(theta, nodes, replicas, m, s)

    def efficiency(self, batch_size: np.ndarray) -> np.ndarray:
        """Statistical efficiency, shape ``(S, *batch_size.shape)``."""
        batch = np.asarray(batch_size, dtype=np.float64)
        _, phi = self._samples(batch)
        return efficiency_from_noise(phi, self.init_bsz, batch)

    def goodput(self, num_nodes: np.ndarray, num_replicas: np.ndarray, local_bsz: np.ndarray,
                accum_steps: np.ndarray | int = 0) -> np.ndarray:
        """Goodput, examples at ``init_bsz`` per second, shape ``(S, *config_shape)``."""
        replicas, m, s = (np.asarray(a, dtype=np.float64)
                          for a in (num_replicas, local_bsz, accum_steps))
        batch = total_batch(replicas, m, s)
        return self.throughput(num_nodes, num_replicas, local_bsz, accum_steps) * self.efficiency(
            batch)

    def optimize(self, num_nodes: np.ndarray | int, num_replicas: np.ndarray | int,
                 max_batch_size: int, local_bsz_range: tuple[int, int],
                 max_accum_steps: int = 15, quantile: float | None = None,
                 grid_size: int = BATCH_GRID_SIZE, accumulate_alone: bool = False) -> BatchChoice:
        """Best ``(m, s)`` for each allocation.

        Args:
            num_nodes, num_replicas: allocations, shape ``(A,)`` (or scalars).
            max_batch_size: largest total batch ``K * m * (s + 1)`` allowed, examples.
            local_bsz_range: ``(smallest, largest)`` per-GPU micro-batch; the largest is the memory
                limit.
            max_accum_steps: most gradient-accumulation steps ``s``.
            quantile: ``None`` maximises posterior-mean goodput; ``q`` maximises its ``q``-quantile
                over the parameter draws (risk-averse for small ``q``).
            grid_size: number of candidate total batch sizes per allocation.
            accumulate_alone: a single GPU whose batch exceeds ``init_bsz`` takes at least one
                accumulation step, as AdaptDL jobs must (their gradient-noise estimate needs two
                micro-batches per step).
        """
        nodes = np.atleast_1d(np.asarray(num_nodes, dtype=np.float64))
        replicas = np.atleast_1d(np.asarray(num_replicas, dtype=np.float64))
        nodes, replicas = np.broadcast_arrays(nodes, replicas)
        feasible, local, accum, valid = candidates_of(
            replicas, self.init_bsz, max_batch_size, local_bsz_range[0], local_bsz_range[1],
            max_accum_steps, grid_size, accumulate_alone)

        best = np.empty(len(nodes), dtype=np.int64)
        scores = np.empty(len(nodes))
        if quantile is None and self.num_samples == 1 and self.theta.shape[1] == 7:
            # A point model: the compiled loop (the same choices, without the grid's arrays).
            from perfmodel.goodput_kernel import best_point_batches

            count = len(nodes)
            best_point_batches(np.broadcast_to(self.theta, (count, 7)),
                               np.broadcast_to(self.noise_to_signal, (count,)),
                               np.full(count, float(self.init_bsz)), nodes, replicas, local,
                               accum, valid, best, scores)
            return _choice(feasible, local, accum, replicas, best, scores)
        chunk = max(1, _CHUNK_ELEMENTS // (self.num_samples * grid_size))
        for start in range(0, len(nodes), chunk):
            part = slice(start, start + chunk)
            value = self.goodput(nodes[part, None], replicas[part, None], local[part],
                                 accum[part])                              # (S, a, G)
            if quantile is None:
                score = value.mean(axis=0)
            else:
                score = np.quantile(value, quantile, axis=0)
            best[part], scores[part] = best_valid(score, ~valid[part])
        return _choice(feasible, local, accum, replicas, best, scores)


def best_valid(score: np.ndarray, invalid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best candidate: ``score`` ``(A, G)`` with ``-inf`` written where ``invalid``
    ``(A, G)`` (in place: ``score`` must be the caller's own, writable), then the index of the
    first of each row's largest (a NaN first of all, as :func:`numpy.argmax`) and the score
    there, ``(A,)`` each (``-inf`` where every candidate is invalid). The pick of
    :meth:`GoodputModel.optimize`'s numpy branch and of the genetic allocator's rescored
    tables; its compiled loop (:func:`perfmodel.goodput_kernel.best_point_batches`) picks alike."""
    np.putmask(score, invalid, -np.inf)
    best = np.argmax(score, axis=1)
    return best, np.take_along_axis(score, best[:, None], axis=1)[:, 0]


def _examples_per_second(theta: np.ndarray, nodes: np.ndarray, replicas: np.ndarray,
                         local_bsz: np.ndarray, accum_steps: np.ndarray) -> np.ndarray:
    """Throughput, examples per second, of micro-batch ``local_bsz`` with ``accum_steps``
    accumulation steps on ``replicas`` GPUs of ``nodes`` nodes; ``theta``'s leading axes broadcast
    as in :func:`~perfmodel.throughput.step_time_terms`."""
    t_c, t_o = step_time_terms(theta, nodes, replicas, local_bsz)
    return total_batch(replicas, local_bsz, accum_steps) / (accum_steps * t_c + t_o)


def batch_candidates(num_replicas: np.ndarray, init_bsz: np.ndarray | int,
                     max_batch_size: np.ndarray | int, min_local_bsz: np.ndarray | int,
                     max_local_bsz: np.ndarray | int, max_accum_steps: np.ndarray | int,
                     grid_size: int, accumulate_alone: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The candidate batch configurations of :meth:`GoodputModel.optimize` per allocation.

    ``num_replicas`` has shape ``(A,)``; the limits (examples, steps) are scalars or ``(A,)``
    arrays, one per allocation. Returns ``feasible`` ``(A,)`` (some configuration fits) and the
    candidates' micro-batch ``local``, accumulation steps ``accum`` and ``valid`` (within the
    largest total batch), each ``(A, grid_size)``: a geometric grid of total batches from
    ``max(init_bsz, K * min_local)`` to the most the memory and accumulation limits allow, each
    with the fewest accumulation steps that keep the micro-batch within ``max_local``, rounded up.
    """
    replicas = np.asarray(num_replicas, dtype=np.float64)
    init, max_batch, lo_m, hi_m, max_accum = (
        np.broadcast_to(np.asarray(a, dtype=np.float64), replicas.shape)
        for a in (init_bsz, max_batch_size, min_local_bsz, max_local_bsz, max_accum_steps))
    k = np.maximum(replicas, 1.0)
    b_min = np.maximum(init, k * lo_m)
    b_max = np.minimum(max_batch, k * hi_m * (max_accum + 1))
    feasible = (replicas > 0) & (k * lo_m <= max_batch) & (b_min <= b_max)
    b_max = np.where(feasible, b_max, b_min)

    frac = np.linspace(0.0, 1.0, grid_size)
    batch = b_min[:, None] * (b_max / b_min)[:, None] ** frac          # (A, G)
    accum = np.clip(np.ceil(batch / (k[:, None] * hi_m[:, None]) - 1e-9) - 1, 0,
                    max_accum[:, None])
    if accumulate_alone:
        alone = ((k[:, None] == 1) & (batch > init[:, None] + 1e-9)
                 & (max_accum[:, None] >= 1))
        accum = np.where(alone, np.maximum(accum, 1), accum)
    # Round the micro-batch up, as Pollux does (a micro-step's fixed overhead favours full
    # micro-batches: rounding 8 down to 7 costs a tenth of YOLOv3's throughput), but not past
    # the largest total batch.
    per_step = k[:, None] * (accum + 1)
    local = np.minimum(np.ceil(batch / per_step - 1e-9),
                       np.floor(max_batch[:, None] / per_step + 1e-9))
    local = np.clip(local, lo_m[:, None], hi_m[:, None])
    valid = total_batch(k[:, None], local, accum) <= max_batch[:, None]  # (A, G)
    return feasible, local, accum, valid


Candidates = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: Most elements (over all remembered candidate arrays) :func:`candidates_of` and
#: :func:`_row_candidates` keep, each; least recently used go first.
CANDIDATE_MEMO_ELEMENTS = 250_000
_WHOLE_MEMO: OrderedDict[tuple[object, ...], Candidates] = OrderedDict()
_ROW_MEMO: OrderedDict[tuple[float, ...], Candidates] = OrderedDict()
_MEMO_SIZE = {"whole": 0, "row": 0}


def _remember(memo: OrderedDict[Any, Candidates], which: str, key: Any, value: Candidates
              ) -> None:
    for array in value:
        array.flags.writeable = False
    memo[key] = value
    _MEMO_SIZE[which] += value[1].size
    while _MEMO_SIZE[which] > CANDIDATE_MEMO_ELEMENTS and len(memo) > 1:
        _, dropped = memo.popitem(last=False)
        _MEMO_SIZE[which] -= dropped[1].size


def candidates_of(num_replicas: np.ndarray, init_bsz: int, max_batch_size: int,
                  min_local_bsz: int, max_local_bsz: int, max_accum_steps: int, grid_size: int,
                  accumulate_alone: bool) -> Candidates:
    """:func:`batch_candidates` for one job's scalar limits, remembered (read-only arrays).

    The candidates are a function of the allocations and the limits only, not of the model, and
    a job's goodput table is rebuilt at every refit over the same allocations (and jobs of one
    application share the limits), so the grid is built once per distinct argument set, in a
    table bounded by :data:`CANDIDATE_MEMO_ELEMENTS`."""
    replicas = np.asarray(num_replicas, dtype=np.float64)
    key = (replicas.tobytes(), float(init_bsz), float(max_batch_size), float(min_local_bsz),
           float(max_local_bsz), float(max_accum_steps), int(grid_size), bool(accumulate_alone))
    found = _WHOLE_MEMO.get(key)
    if found is not None:
        _WHOLE_MEMO.move_to_end(key)
        return found
    found = batch_candidates(replicas, init_bsz, max_batch_size, min_local_bsz, max_local_bsz,
                             max_accum_steps, grid_size, accumulate_alone)
    _remember(_WHOLE_MEMO, "whole", key, found)
    return found


def _row_candidates(replicas: np.ndarray, init_bsz: np.ndarray, max_batch_size: np.ndarray,
                    min_local_bsz: np.ndarray, max_local_bsz: np.ndarray,
                    max_accum_steps: np.ndarray, grid_size: int, accumulate_alone: bool
                    ) -> Candidates:
    """:func:`batch_candidates` with per-row limits ``(A,)``, each row's candidates remembered
    (rows repeat: one application's jobs on one GPU count); the rows not seen before are built
    in one vectorised call."""
    columns = [np.broadcast_to(np.asarray(a, dtype=np.float64), replicas.shape).tolist()
               for a in (replicas, init_bsz, max_batch_size, min_local_bsz, max_local_bsz,
                         max_accum_steps)]
    keys = [(*row, float(grid_size), float(accumulate_alone))
            for row in zip(*columns, strict=True)]
    found: list[Candidates | None] = [_ROW_MEMO.get(key) for key in keys]
    missing = [i for i, row in enumerate(found) if row is None]
    if missing:
        rows = np.array(missing)
        k, init, max_batch, lo_m, hi_m, max_accum = (np.asarray(column)[rows]
                                                     for column in columns)
        built = batch_candidates(k, init, max_batch, lo_m, hi_m, max_accum, grid_size,
                                 accumulate_alone)
        for j, i in enumerate(missing):
            found[i] = (built[0][j: j + 1], built[1][j], built[2][j], built[3][j])
    for key, row in zip(keys, found, strict=True):
        if key in _ROW_MEMO:
            _ROW_MEMO.move_to_end(key)
        else:
            assert row is not None
            _remember(_ROW_MEMO, "row", key, row)
    rows_found = [row for row in found if row is not None]
    return (np.concatenate([f[0] for f in rows_found]), np.stack([f[1] for f in rows_found]),
            np.stack([f[2] for f in rows_found]), np.stack([f[3] for f in rows_found]))


def _choice(feasible: np.ndarray, local: np.ndarray, accum: np.ndarray, replicas: np.ndarray,
            best: np.ndarray, scores: np.ndarray) -> BatchChoice:
    """The :class:`BatchChoice` of candidate ``best`` per allocation (zeros where infeasible)."""
    rows = np.arange(len(replicas))
    m = np.where(feasible, local[rows, best], 0.0)
    s = np.where(feasible, accum[rows, best], 0.0)
    return BatchChoice(
        goodput=np.where(feasible, scores, 0.0),
        local_bsz=m.astype(np.int64),
        accum_steps=s.astype(np.int64),
        batch_size=total_batch(replicas, m, s).astype(np.int64),
    )


def optimize_each(theta: np.ndarray, noise_to_signal: np.ndarray, init_bsz: np.ndarray,
                  num_nodes: np.ndarray, num_replicas: np.ndarray, max_batch_size: np.ndarray,
                  min_local_bsz: np.ndarray, max_local_bsz: np.ndarray,
                  max_accum_steps: np.ndarray, grid_size: int = BATCH_GRID_SIZE,
                  accumulate_alone: bool = False) -> BatchChoice:
    """:meth:`GoodputModel.optimize` of A point models at once, one allocation each: row ``i``
    is the best batch of the job with parameters ``theta[i]`` (``(A, 7)``, :data:`~perfmodel.
    throughput.PARAM_NAMES` order), gradient noise ``noise_to_signal[i]`` and initial batch
    ``init_bsz[i]`` on ``num_replicas[i]`` GPUs of ``num_nodes[i]`` nodes, within its own limits
    (the remaining arguments, each ``(A,)``). One compiled pass
    (:func:`perfmodel.goodput_kernel.best_point_batches`) instead of A calls; each row equals that
    job's own ``optimize`` (posterior-mean goodput of its point model)."""
    theta = np.asarray(theta, dtype=np.float64)
    phi = np.asarray(noise_to_signal, dtype=np.float64)
    nodes = np.asarray(num_nodes, dtype=np.float64)
    replicas = np.asarray(num_replicas, dtype=np.float64)
    init = np.asarray(init_bsz, dtype=np.float64)
    feasible, local, accum, valid = _row_candidates(
        replicas, init, max_batch_size, min_local_bsz, max_local_bsz, max_accum_steps,
        grid_size, accumulate_alone)
    from perfmodel.goodput_kernel import best_point_batches

    best = np.empty(len(replicas), dtype=np.int64)
    scores = np.empty(len(replicas))
    best_point_batches(theta, phi, init, nodes, replicas, local, accum, valid, best, scores)
    return _choice(feasible, local, accum, replicas, best, scores)
