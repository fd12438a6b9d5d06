from __future__ import annotations

import itertools

import numpy as np
import pytest

from perfmodel.goodput import GoodputModel, optimize_each
from tests.conftest import TRUE_PARAMS


def brute_force(model: GoodputModel, nodes: int, gpus: int, max_batch: int,
                m_range: tuple[int, int], max_accum: int) -> float:
    best = 0.0
    for m, s in itertools.product(range(m_range[0], m_range[1] + 1), range(max_accum + 1)):
        batch = gpus * m * (s + 1)
        if model.init_bsz <= batch <= max_batch:
            best = max(best, float(model.goodput(nodes, gpus, m, s).mean()))
    return best


def test_optimize_matches_brute_force_and_respects_limits() -> None:
    model = GoodputModel.from_noise_to_signal(TRUE_PARAMS, 40.0, init_bsz=64)
    nodes = np.array([1, 1, 2, 4, 8])
    gpus = np.array([1, 4, 8, 16, 32])
    choice = model.optimize(nodes, gpus, max_batch_size=2048, local_bsz_range=(8, 64),
                            max_accum_steps=4)
    assert np.all(choice.batch_size <= 2048)
    assert np.all((choice.local_bsz >= 8) & (choice.local_bsz <= 64))
    assert np.all(choice.accum_steps <= 4)
    assert np.all(choice.batch_size == gpus * choice.local_bsz * (choice.accum_steps + 1))
    for i in range(len(nodes)):
        best = brute_force(model, nodes[i], gpus[i], 2048, (8, 64), 4)
        assert choice.goodput[i] >= 0.97 * best
        assert choice.goodput[i] <= best * (1 + 1e-9)


def test_infeasible_allocations_get_zero_goodput() -> None:
    model = GoodputModel.from_noise_to_signal(TRUE_PARAMS, 40.0, init_bsz=64)
    choice = model.optimize(np.array([0, 16]), np.array([0, 64]), max_batch_size=256,
                            local_bsz_range=(8, 64))
    assert choice.goodput.tolist() == [0.0, 0.0]  # no GPUs; 64 GPUs x 8 exceeds 256


def test_risk_averse_tuning_scores_below_the_mean() -> None:
    rng = np.random.default_rng(0)
    theta = TRUE_PARAMS.as_array() * np.exp(0.3 * rng.standard_normal((64, 7)))
    theta[:, 6] = 2.0
    model = GoodputModel.from_noise_to_signal(theta, 40.0, init_bsz=64)
    nodes, gpus = np.array([1, 2, 4]), np.array([4, 8, 16])
    mean = model.optimize(nodes, gpus, 4096, (8, 128))
    cautious = model.optimize(nodes, gpus, 4096, (8, 128), quantile=0.1)
    assert np.all(cautious.goodput < mean.goodput)


def test_optimize_scales_to_many_allocations() -> None:
    model = GoodputModel.from_noise_to_signal(TRUE_PARAMS, 40.0, init_bsz=64)
    rng = np.random.default_rng(0)
    nodes = rng.integers(1, 17, 10_000)
    gpus = nodes * rng.integers(1, 5, 10_000)
    choice = model.optimize(nodes, gpus, 8192, (8, 128))
    assert choice.goodput.shape == (10_000,)
    assert np.all(choice.goodput > 0)


def test_micro_batches_round_up_to_full_ones_within_the_batch_limit() -> None:
    # With a costly micro-step and a memory limit of 8, the tuned micro-batch is a full 8 (the
    # artifact rounds up), never pushing the total batch past the maximum.
    model = GoodputModel.from_noise_to_signal(TRUE_PARAMS, 1e4, init_bsz=8)
    choice = model.optimize(np.array([1, 1]), np.array([1, 4]), max_batch_size=100,
                            local_bsz_range=(4, 8), max_accum_steps=20)
    assert np.all(choice.batch_size <= 100)
    assert choice.local_bsz.tolist() == [8, 8]


def test_a_lone_gpu_accumulates_beyond_the_initial_batch() -> None:
    model = GoodputModel.from_noise_to_signal(TRUE_PARAMS, 1e3, init_bsz=64)
    free = model.optimize(1, 1, 1024, (8, 256), max_accum_steps=8)
    alone = model.optimize(1, 1, 1024, (8, 256), max_accum_steps=8, accumulate_alone=True)
    assert free.batch_size[0] > 64 and free.accum_steps[0] == 0
    assert alone.batch_size[0] > 64 and alone.accum_steps[0] >= 1
    assert alone.goodput[0] <= free.goodput[0]


def test_optimize_each_equals_each_models_own_optimize() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(60):
        theta = TRUE_PARAMS.as_array() * rng.lognormal(0.0, 0.8, 7)
        theta[6] = rng.uniform(1.0, 8.0)   # gamma within its bounds
        nodes = int(rng.integers(1, 5))
        gpus = 0 if i % 9 == 0 else nodes * int(rng.integers(1, 5))   # some infeasible rows
        lo = int(rng.choice([1, 4, 8]))
        rows.append((theta, float(rng.lognormal(3, 2)), int(rng.choice([32, 64, 128])), nodes,
                     gpus, int(rng.choice([256, 1024, 4096])), lo, lo * int(rng.integers(1, 64)),
                     int(rng.integers(0, 16))))
    for alone in (False, True):
        columns = [np.array([row[k] for row in rows]) for k in range(9)]
        each = optimize_each(columns[0], columns[1], columns[2], columns[3], columns[4],
                             columns[5], columns[6], columns[7], columns[8],
                             accumulate_alone=alone)
        for i, (theta, phi, init, nodes, gpus, max_batch, lo, hi, accum) in enumerate(rows):
            own = GoodputModel.from_noise_to_signal(theta, phi, init).optimize(
                nodes, gpus, max_batch, (lo, hi), max_accum_steps=accum, accumulate_alone=alone)
            for field in ("goodput", "local_bsz", "accum_steps", "batch_size"):
                assert getattr(each, field)[i] == getattr(own, field)[0], (i, field)


def test_remembered_candidates_equal_the_built_ones_and_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfmodel import goodput

    monkeypatch.setattr(goodput, "CANDIDATE_MEMO_ELEMENTS", 48 * 5)
    replicas = np.array([1.0, 2.0, 4.0, 8.0, 3.0])
    limits = (np.array([128.0, 256, 128, 128, 64]), np.array([4096.0, 4096, 2048, 4096, 512]),
              np.array([4.0, 8, 4, 4, 2]), np.array([64.0, 128, 64, 64, 32]),
              np.array([15.0, 15, 3, 0, 15]))
    expected = goodput.batch_candidates(replicas, *limits, 48, True)
    for _ in range(2):  # built, then remembered
        rows = goodput._row_candidates(replicas, *limits, 48, True)
        for got, want in zip(rows, expected, strict=True):
            assert np.array_equal(got, want)
    whole = goodput.candidates_of(replicas, 128, 4096, 4, 64, 15, 48, True)
    again = goodput.candidates_of(replicas, 128, 4096, 4, 64, 15, 48, True)
    assert whole is again and not whole[1].flags.writeable
    for got, want in zip(whole, goodput.batch_candidates(replicas, 128, 4096, 4, 64, 15, 48, True),
                         strict=True):
        assert np.array_equal(got, want)
    # Ten more distinct rows: the table keeps at most its bound's worth.
    goodput._row_candidates(np.arange(1.0, 11.0), 128, 4096, 4, 64, 15, 48, True)
    assert sum(row[1].size for row in goodput._ROW_MEMO.values()) <= 48 * 5


def test_point_choices_equal_the_numpy_evaluation_of_every_candidate() -> None:
    # The compiled loop picks, per allocation, a candidate the whole-grid numpy goodput ranks
    # first (to rounding: numpy's vectorised pow may differ from libm's in the last bit), with
    # that goodput.
    from perfmodel.goodput import batch_candidates

    rng = np.random.default_rng(3)
    nodes = np.array([1.0, 1, 1, 2, 2, 4, 8, 1])
    replicas = np.array([1.0, 2, 4, 4, 8, 16, 32, 0])
    for _ in range(20):
        theta = np.append(np.exp(rng.uniform(-7, -1, 6)), rng.uniform(1, 4))
        model = GoodputModel(theta, 1.0, float(np.exp(rng.uniform(-3, 4))), 128)
        choice = model.optimize(nodes, replicas, 8192, (8, 256), max_accum_steps=7,
                                accumulate_alone=True)
        feasible, local, accum, valid = batch_candidates(replicas, 128, 8192, 8, 256, 7, 48,
                                                         True)
        value = model.goodput(nodes[:, None], replicas[:, None], local, accum)[0]
        score = np.where(valid, value, -np.inf)
        top = np.where(feasible, score.max(axis=1), 0.0)
        assert np.allclose(choice.goodput, top, rtol=1e-12, atol=0)
        for row in np.flatnonzero(feasible):
            picked = np.flatnonzero((local[row] == choice.local_bsz[row])
                                    & (accum[row] == choice.accum_steps[row]) & valid[row])
            assert picked.size and np.isclose(score[row, picked].max(), top[row], rtol=1e-12)
        assert not np.any(choice.local_bsz[~feasible])


def test_best_valid_picks_the_first_largest_valid_candidate_per_row() -> None:
    # The one masked pick optimize's numpy branch and the genetic allocator's rescored tables
    # share: invalid candidates never win, ties go to the first, a NaN wins (as numpy's argmax),
    # and a row with no valid candidate scores -inf.
    from perfmodel.goodput import best_valid

    score = np.array([[1.0, 5.0, 3.0], [2.0, 2.0, 1.0], [np.nan, 9.0, 1.0], [4.0, 7.0, 8.0]])
    invalid = np.array([[False, True, False], [False, False, False], [False, False, False],
                        [True, True, True]])
    best, top = best_valid(score, invalid)
    assert best.tolist() == [2, 0, 0, 0]
    assert top[:2].tolist() == [3.0, 2.0] and np.isnan(top[2]) and top[3] == -np.inf
