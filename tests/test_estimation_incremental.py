"""Our learner's online fits update the posterior's precision in place of a full rebuild: they
must give the full build's posterior (mean and variance of every cell's log steps/s, observed or
not, alone or paired, of a type seen or never seen) to rounding."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.bayesian import (
    _NORMAL_STREAMS,
    BayesianThroughputLearner,
    _standard_normals,
)
from bayes_sched.estimation.throughput.effects import cell_features
from bayes_sched.estimation.throughput.observations import table_rate
from bayes_sched.estimation.throughput.weight_space import QueryRows, feature_rows
from bayes_sched.throughputs import ThroughputTable, load_throughputs

SIMULATION = load_throughputs("simulation")
GPUS = ("v100", "p100", "k80")


def _types() -> list[str]:
    """Job types of three families with two batch sizes each, so that a type arriving later
    moves its family's batch centre (and every row of that family)."""
    by_family: dict[str, list[str]] = {}
    for job_type in SIMULATION.job_types:
        by_family.setdefault(job_type.split(" (")[0], []).append(job_type)
    families = [types for types in by_family.values() if len(types) >= 2][:3]
    return [t for types in families for t in types[:2]]


def _report(table: ThroughputTable, cell: Cell, factor: float, seconds: float
            ) -> CellObservation | None:
    rate = table_rate(table, cell)
    return None if not rate else CellObservation(cell, rate * factor, seconds)


def _rounds(seed: int) -> list[list[CellObservation]]:
    """Reports arriving round by round: types join one at a time (new effects, new batch
    centres), cells measured again (their pooled rate and seconds move), alone reports at a
    place where pairs are measured (the pairs' loads move), and pairs."""
    rng = np.random.default_rng(seed)
    types = _types()
    rounds: list[list[CellObservation]] = []
    for r in range(len(types) + 3):
        known = types[:min(r + 1, len(types))]
        cells = [Cell(t, s, g) for t in known for s in (1, 2) for g in GPUS]
        cells += [Cell(a, 1, g, b) for a in known for b in known for g in GPUS[:2]]
        chosen = rng.choice(len(cells), size=min(len(cells), 12), replace=False)
        reports = [_report(SIMULATION, cells[i], float(np.exp(rng.normal(0, 0.05))),
                           float(rng.uniform(60, 600))) for i in chosen]
        rounds.append([o for o in reports if o is not None])
    return rounds


def _queries() -> list[Cell]:
    types = _types()
    unseen = next(t for t in SIMULATION.job_types if t not in types)
    cells = [Cell(t, s, g) for t in [*types, unseen] for s in (1, 2, 4) for g in GPUS]
    cells += [Cell(a, 1, g, b) for a in [*types, unseen] for b in types for g in GPUS]
    return cells


def _moments(learner: BayesianThroughputLearner, observations: list[CellObservation]
             ) -> tuple[np.ndarray, np.ndarray]:
    mean, var, _ = learner.fit(observations).log_moments(_queries())
    return mean, var


def _shifted_log_variances() -> np.ndarray:
    """The default hyperparameters, each moved by its own amount (not the fitted ones)."""
    base = BayesianThroughputLearner().log_variances
    return base + np.linspace(-1.0, 0.5, len(base))


def test_online_conditioning_equals_the_full_build_after_every_round() -> None:
    params = _shifted_log_variances()
    online = BayesianThroughputLearner(max_iterations=0, log_variances=params)
    growing: list[CellObservation] = []
    updated = 0
    for reports in _rounds(seed=3):
        growing.extend(reports)
        full_before = online._design._terms is not None
        mean, var = _moments(online, growing)
        updated += full_before  # this fit updated the terms in place
        # A fresh learner on a copy of the list builds everything from scratch.
        fresh = BayesianThroughputLearner(max_iterations=0, log_variances=params)
        mean_full, var_full = _moments(fresh, list(growing))
        np.testing.assert_allclose(mean, mean_full, rtol=0, atol=1e-8)
        np.testing.assert_allclose(var, var_full, rtol=1e-8, atol=1e-10)
    assert updated >= 6


def test_online_fits_with_hyperparameter_refits_equal_a_full_build_at_their_hyperparameters(
        ) -> None:
    online = BayesianThroughputLearner()
    growing: list[CellObservation] = []
    for reports in _rounds(seed=5)[:5]:
        growing.extend(reports)
        mean, var = _moments(online, growing)
        fresh = BayesianThroughputLearner(max_iterations=0, log_variances=online.log_variances)
        mean_full, var_full = _moments(fresh, list(growing))
        np.testing.assert_allclose(mean, mean_full, rtol=0, atol=1e-8)
        np.testing.assert_allclose(var, var_full, rtol=1e-8, atol=1e-10)


def test_query_rows_kept_across_fits_are_the_rows_built_from_the_cells_features() -> None:
    """A lineage keeps its query rows across beliefs (the columns grow, batch centres and pair
    loads move): at every fit, dense and sparse, they must be exactly the rows read off
    :func:`cell_features` over the belief's columns, and its moments those of fresh rows."""
    online = BayesianThroughputLearner(max_iterations=0)
    growing: list[CellObservation] = []
    queries = _queries()
    for reports in _rounds(seed=3):
        growing.extend(reports)
        belief = online.fit(growing)
        assert belief.design is not None
        columns = belief.design.columns
        expected = np.zeros((len(queries), len(columns)))
        unknown: list[tuple[int, tuple[str, tuple[object, ...]], float]] = []
        for r, cell in enumerate(queries):
            for name, key, value in cell_features(cell, belief.context):
                if (name, key) in columns:
                    expected[r, columns[(name, key)]] = value
                else:
                    unknown.append((r, (name, key), value))
        for dense in (True, False):
            phi, (rows, effects, values) = feature_rows(queries, belief.context, columns,
                                                         belief._query_rows, dense=dense)
            assert isinstance(phi, np.ndarray) == dense
            np.testing.assert_array_equal(phi if isinstance(phi, np.ndarray) else phi.toarray(),
                                          expected)
            assert list(zip(rows, effects, values, strict=True)) == unknown
        fresh = replace(belief, _query_rows=QueryRows())
        for got, want in zip(belief.log_moments(queries)[:2], fresh.log_moments(queries)[:2],
                             strict=True):
            np.testing.assert_array_equal(got, want)


def test_draws_of_a_few_cells_repeat_by_seed_and_have_the_posterior_moments() -> None:
    learner = BayesianThroughputLearner(max_iterations=0)
    belief = learner.fit([o for reports in _rounds(seed=1) for o in reports])
    few = _queries()[:5]  # fewer cells than effects: the draws go through L^-1 phi^T
    first = belief.predict(few, num_draws=4000, seed=7).draws
    np.testing.assert_array_equal(first, belief.predict(few, num_draws=4000, seed=7).draws)
    mean, var, _ = belief.log_moments(few)
    logs = np.log(first)
    np.testing.assert_allclose(logs.mean(axis=0), mean, atol=4 * np.sqrt(var.max() / 4000))
    np.testing.assert_allclose(logs.var(axis=0), var, rtol=0.1)


def test_log_covariance_is_the_draws_covariance_and_has_the_moments_variance() -> None:
    """The exact covariance (a profiling plan's) must be what the draws are made of: its
    diagonal the moments' variance, every entry the sample covariance of many draws, and the
    same for a few cells (through ``L^-1 phi^T``) as within a query of many (sparse rows)."""
    learner = BayesianThroughputLearner(max_iterations=0, learn_pair_fits=False)
    belief = learner.fit([o for reports in _rounds(seed=1) for o in reports])
    queries = _queries()
    few = [queries[0], queries[3], queries[-20], queries[-1], queries[-4]]  # unseen, pairs
    cov = belief.log_covariance(few)
    np.testing.assert_allclose(np.diag(cov), belief.log_moments(few)[1], rtol=1e-10)
    np.testing.assert_allclose(cov, cov.T, rtol=1e-12)
    logs = np.log(belief.predict(few, num_draws=20000, seed=3).draws)
    sample = np.cov(logs, rowvar=False)
    scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    assert np.abs((sample - cov) / scale).max() < 0.05  # correlations to sampling error
    assert np.abs(cov / scale - np.eye(len(few))).max() > 0.1  # they do covary
    many = belief.log_covariance([*few, *queries])
    assert belief.posterior is not None
    assert len(few) + len(queries) > len(belief.posterior.mean)  # the sparse path
    np.testing.assert_allclose(many[:len(few), :len(few)], cov, rtol=1e-9, atol=1e-12)


def test_kept_normals_grown_with_the_effects_are_the_fresh_draws_and_generator_state() -> None:
    """Many draws' normals are kept per (draws, seed) and grown as the effects grow:
    every size asked for, in any order, must be exactly the fresh ``(p, draws)`` draw, and the
    generator must continue from exactly where the fresh draw leaves it."""
    for p in (5, 9, 3, 9, 14, 0, 12):
        z, state = _standard_normals(p, 64, seed=11)
        rng = np.random.default_rng(11)
        np.testing.assert_array_equal(z, rng.standard_normal((p, 64)))
        assert state == rng.bit_generator.state
        assert not z.flags.writeable
    few, state = _standard_normals(7, 1, seed=11)  # one Thompson draw: drawn afresh
    rng = np.random.default_rng(11)
    np.testing.assert_array_equal(few, rng.standard_normal((7, 1)))
    assert state == rng.bit_generator.state


def test_one_off_seeds_are_drawn_afresh_and_keep_the_asked_again_stream() -> None:
    """A (draws, seed) asked for once is drawn afresh (the value-of-information draws take a new
    seed per call); one asked for again is kept, and many one-off seeds do not evict it."""
    _standard_normals(6, 64, seed=21)
    kept, _ = _standard_normals(6, 64, seed=21)
    assert (64, 21) in _NORMAL_STREAMS
    for seed in range(1000, 1010):
        z, state = _standard_normals(6, 64, seed=seed)
        rng = np.random.default_rng(seed)
        np.testing.assert_array_equal(z, rng.standard_normal((6, 64)))
        assert state == rng.bit_generator.state
        assert (64, seed) not in _NORMAL_STREAMS
    assert (64, 21) in _NORMAL_STREAMS
    np.testing.assert_array_equal(kept, np.random.default_rng(21).standard_normal((6, 64)))
