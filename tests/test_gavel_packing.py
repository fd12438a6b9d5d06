"""Gavel's packed max-min LP solved per job class: the same optimum as the LP over every job pair,
an allocation that is feasible in that LP, and the direct solver path against cvxpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.policies.gavel.max_min_fairness import (
    MaxMinFairnessPackedPolicy,
    packed_max_min_allocation,
)
from bayes_sched.policies.gavel.packing import class_terms, combination_terms
from bayes_sched.policies.gavel.time_sharing import AllocationInputs
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
ORACLE = oracle_estimates(TABLE)  # the truth, as the world's oracle publishes it
#: Job types (scale factor 1 unless given): repeated types make classes of 1-4 jobs (six in all); the two
#: 2-GPU jobs form a class of their own scale factor.
JOB_TYPES = ("ResNet-18 (batch size 16)", "CycleGAN", "A3C", "LM (batch size 5)", "A3C",
             "CycleGAN", "A3C", "Transformer (batch size 16)", "A3C",
             ("ResNet-18 (batch size 64)", 2), ("ResNet-18 (batch size 64)", 2))


def _inputs(cluster: str = "v100:1x2,p100:1x2,k80:1x2") -> AllocationInputs:
    """The inputs Gavel's packed policy builds for the jobs above (captured from a decision)."""
    spec = replace(load_cluster_spec(cluster), round_interval=360.0)
    jobs = [make_job(str(i), 0.0, *(t if isinstance(t, tuple) else (t, 1)), 1e9)
            for i, t in enumerate(JOB_TYPES)]
    seen: list[AllocationInputs] = []

    class Capture(MaxMinFairnessPackedPolicy):
        def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
            seen.append(inputs)
            return super().allocate_combinations(inputs)

    Capture().decide(ClusterState(spec=spec, now=360.0), TableCluster(jobs, spec, TABLE).job_views(),
                     ORACLE)
    return seen[0]


def _normalised_throughputs(x: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
    """Each job's effective steps/s under allocation ``x`` ``(J + P, T)`` (alone and in its
    pairs), times its scale factor over its summed rates alone (Gavel's normalisation)."""
    num_jobs = inputs.num_jobs
    effective = (inputs.throughputs * x[:num_jobs]).sum(axis=1)
    for p, (a, b) in enumerate(inputs.pairs):
        effective[a] += inputs.pair_throughputs[p, 0] @ x[num_jobs + p]
        effective[b] += inputs.pair_throughputs[p, 1] @ x[num_jobs + p]
    return effective * inputs.scale_factors / inputs.throughputs.sum(axis=1)


def assert_within_capacity(x: np.ndarray, inputs: AllocationInputs,
                           capacities: np.ndarray) -> None:
    """Time fractions ``x`` (jobs, then pairs) are non-negative, give each job at most all of its
    time, and use at most ``capacities`` GPUs of each type."""
    num_jobs = inputs.num_jobs
    assert np.all(x >= -1e-7)
    time = x[:num_jobs].sum(axis=1)
    gpus = (inputs.scale_factors[:, None] * x[:num_jobs]).sum(axis=0)
    for p, (a, b) in enumerate(inputs.pairs):
        time[a] += x[num_jobs + p].sum()
        time[b] += x[num_jobs + p].sum()
        gpus += inputs.scale_factors[a] * x[num_jobs + p]
    assert np.all(time <= 1 + 1e-6) and np.all(gpus <= capacities + 1e-6)


def _assert_feasible(x: np.ndarray, inputs: AllocationInputs) -> None:
    """The full LP's constraints: non-negative, each job's time <= 1, each type's GPUs."""
    assert_within_capacity(x, inputs, inputs.capacities)
    num_jobs = inputs.num_jobs
    # Pairs get time only on types where both members run together.
    usable = inputs.pair_throughputs.min(axis=1) > 0
    assert np.all(x[num_jobs:][~usable] <= 1e-7)


@pytest.mark.parametrize("solver", ["CLARABEL", "HIGHS"])
def test_the_per_class_lp_has_the_full_lps_optimum(solver: str) -> None:
    """Eleven jobs in six classes on 2 GPUs of each type (packing pays): the LP over classes
    reaches the least normalised throughput of the LP over all 45 job pairs, its expanded
    allocation is feasible there, and jobs of one class get the same fractions."""
    inputs = _inputs()
    reduced = packed_max_min_allocation(inputs, solver)
    full = packed_max_min_allocation(inputs, solver, per_class=False)
    assert reduced is not None and full is not None
    _assert_feasible(reduced, inputs)
    _assert_feasible(full, inputs)
    best, ours = _normalised_throughputs(full, inputs).min(), _normalised_throughputs(
        reduced, inputs).min()
    assert ours == pytest.approx(best, rel=1e-5)
    assert best > 0
    for c in np.unique(inputs.job_classes):
        rows = reduced[:inputs.num_jobs][inputs.job_classes == c]
        assert np.allclose(rows, rows[0])
    # Some pairs share GPUs: the reduction is exercised, not bypassed.
    assert reduced[inputs.num_jobs:].sum() > 0.1


def test_the_per_class_lp_is_smaller() -> None:
    """Its entries number per class and class pair, not per job pair."""
    inputs = _inputs()
    num_classes = len(np.unique(inputs.job_classes))
    reduced, full = class_terms(inputs).terms, combination_terms(inputs)
    assert reduced.rates.shape[0] == num_classes == 6
    assert reduced.num_entries < full.num_entries / 2


def test_the_direct_programs_reach_the_cvxpy_formulations_optimum() -> None:
    """The LPs built as matrices (max-min, max-sum; the finish-time-fairness SOCP) reach the
    optimum of the same programs stated in cvxpy, on the jobs above alone (no packing)."""
    import cvxpy as cp

    from bayes_sched.mechanisms.time_fraction_lp import (
        dense_terms,
        max_min_program,
        max_sum_program,
        min_max_ratio_program,
        solve_allocation,
    )
    from bayes_sched.policies.gavel.finish_time_fairness import isolated_throughputs

    inputs = _inputs()
    rates, sizes, capacities = inputs.throughputs, inputs.scale_factors, inputs.capacities
    terms = dense_terms(rates, sizes)
    weights = sizes / (rates @ (capacities / capacities.sum()))
    remaining = np.linspace(1e4, 5e4, inputs.num_jobs)
    elapsed = np.full(inputs.num_jobs, 1800.0)
    denominator = remaining / isolated_throughputs(rates, sizes, capacities)
    x = cp.Variable(rates.shape)
    effective = cp.sum(cp.multiply(rates, x), axis=1)
    constraints = [x >= 0, cp.sum(x, axis=1) <= 1,
                   cp.sum(cp.multiply(sizes[:, None], x), axis=0) <= capacities]
    worst = cp.Variable()
    references = {
        "max_min": cp.Problem(cp.Maximize(cp.min(cp.multiply(weights, effective))), constraints),
        "max_sum": cp.Problem(cp.Maximize(cp.sum(effective)), constraints),
        "ratio": cp.Problem(cp.Minimize(worst), [
            elapsed + cp.multiply(remaining, cp.inv_pos(effective)) <= worst * denominator,
            *constraints])}
    programs = {
        "max_min": max_min_program(dense_terms(rates * weights[:, None], sizes).rates, terms,
                                   capacities),
        "max_sum": max_sum_program(terms, capacities),
        "ratio": min_max_ratio_program(terms, capacities, elapsed, remaining, denominator)}
    for name, program in programs.items():
        ours = solve_allocation(program, terms, inputs.num_jobs, "CLARABEL")
        assert ours is not None
        _assert_feasible(np.concatenate([ours, np.zeros((len(inputs.pairs), 3))]), inputs)
        references[name].solve(solver="CLARABEL")
        e = (rates * ours).sum(axis=1)
        value = {"max_min": (weights * e).min(), "max_sum": e.sum(),
                 "ratio": ((elapsed + remaining / e) / denominator).max()}[name]
        assert value == pytest.approx(references[name].value, rel=1e-5), name


def _effective(x: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
    """Each job's steps/s under allocation ``x`` ``(J + P, T)``."""
    return _normalised_throughputs(x, inputs) * inputs.throughputs.sum(axis=1) / (
        inputs.scale_factors)


@pytest.mark.parametrize("solver", ["CLARABEL", "HIGHS"])
def test_the_per_partner_class_lp_has_the_pair_lps_optimum(solver: str) -> None:
    """Finish-time fairness (an SOCP, CLARABEL only) and min total duration's fastest horizon
    over (job, partner class) entries reach the optimum over all job pairs, with jobs that
    differ in remaining steps and age (no class symmetry), and the answer expanded to job
    pairs is feasible there and attains it."""
    from bayes_sched.mechanisms.time_fraction_lp import (
        fastest_finish_program,
        min_max_ratio_program,
        solve_program,
    )
    from bayes_sched.policies.gavel.packing import packed_layout

    inputs = replace(_inputs(), remaining_steps=np.linspace(2e3, 4e4, len(JOB_TYPES)),
                     elapsed=np.linspace(0.0, 3600.0, len(JOB_TYPES)))
    remaining = inputs.remaining_steps
    denominator = np.linspace(1e3, 8e3, inputs.num_jobs)
    programs = {"finish": lambda terms: fastest_finish_program(terms, inputs.capacities,
                                                               remaining)}
    if solver == "CLARABEL":
        programs["ratio"] = lambda terms: min_max_ratio_program(
            terms, inputs.capacities, inputs.elapsed, remaining, denominator)
    for name, build in programs.items():
        optima, attained = [], []
        for per_partner in (False, True):
            layout = packed_layout(inputs, per_partner)
            values = solve_program(build(layout.terms), solver)
            assert values is not None
            x = layout.expand(values, inputs)
            _assert_feasible(x, inputs)
            optima.append(values[-1])
            rate = _effective(x, inputs)
            attained.append((rate / remaining).min() if name == "finish" else
                            ((inputs.elapsed + remaining / rate) / denominator).max())
        assert optima[1] == pytest.approx(optima[0], rel=1e-5), name
        assert attained[1] == pytest.approx(optima[0], rel=1e-5), name
        assert attained[0] == pytest.approx(optima[0], rel=1e-5), name
    layout = packed_layout(inputs)
    assert layout.expand(solve_program(programs["finish"](layout.terms), solver),
                         inputs)[inputs.num_jobs:].sum() > 0.1  # pairs are used


def test_pairing_within_a_class_keeps_each_jobs_time() -> None:
    """Symmetric, zero diagonal, non-negative, rows summing to the times, whenever no time
    exceeds the rest together (the boundary included)."""
    from bayes_sched.policies.gavel.packing import pair_within_class

    rng = np.random.default_rng(0)
    cases = [np.array([2.0, 1.0, 1.0]), np.array([0.5, 0.5]), np.array([0.3, 0.0, 0.3])]
    cases += [rng.random(n) for n in rng.integers(2, 9, size=200)]
    for times in cases:
        if times.max() > times.sum() - times.max():
            continue
        pairs = pair_within_class(times)
        assert np.allclose(pairs, pairs.T) and np.all(pairs >= 0)
        assert np.allclose(np.diag(pairs), 0.0) and np.allclose(pairs.sum(axis=1), times)


def test_gavels_statement_has_every_same_scale_factor_pair_and_lands_where_cvxpy_does() -> None:
    """Gavel's own statement of the packed LP (every job and every pair of one scale factor on
    every type, zero rates included): 11 + 37 combinations on 3 types, the optimum of the LP
    over measured pairs, a feasible answer once the never-run zero-rate pairs are dropped, and
    the point of the same program stated in cvxpy (Gavel's form) and solved by the same
    interior-point solver; the zero-rate entries take time there, which the measured-pairs LP
    never gives them (8 GPUs of each type: the optimal face is wide enough to differ)."""
    import cvxpy as cp

    from bayes_sched.policies.gavel.packing import gavel_statement_terms

    inputs = _inputs("v100:1x8,p100:1x8,k80:1x8")
    terms, pairs = gavel_statement_terms(inputs)
    assert len(pairs) == 36 + 1 and terms.num_entries == (11 + 37) * 3
    ours = packed_max_min_allocation(inputs, "CLARABEL", gavel_statement=True)
    full = packed_max_min_allocation(inputs, "CLARABEL", per_class=False)
    assert ours is not None and full is not None
    _assert_feasible(ours, inputs)
    assert _normalised_throughputs(ours, inputs).min() == pytest.approx(
        _normalised_throughputs(full, inputs).min(), rel=1e-5)
    # Gavel's form in cvxpy: x (combinations x types), the objective and constraints of
    # MaxMinFairnessPolicyWithPacking.get_allocation.
    num_jobs, num_types = inputs.throughputs.shape
    rows = num_jobs + len(pairs)
    weights = inputs.scale_factors / inputs.throughputs.sum(axis=1)
    x = cp.Variable((rows, num_types))
    normalised, times = [], []
    for j in range(num_jobs):
        rate = terms.unflatten(terms.rates[j].toarray().ravel(), rows, num_types)
        member = terms.unflatten(terms.membership[j].toarray().ravel(), rows, num_types)
        normalised.append(cp.sum(cp.multiply(rate * weights[j], x)))
        times.append(cp.sum(cp.multiply(member, x)))
    sizes = inputs.scale_factors[np.concatenate([np.arange(num_jobs), pairs[:, 0]])]
    problem = cp.Problem(cp.Maximize(cp.minimum(*normalised)), [
        x >= 0, sizes @ x <= inputs.capacities, cp.hstack(times) <= 1])
    problem.solve(solver="CLARABEL")
    theirs = np.clip(x.value, 0.0, 1.0)
    index = {(int(a), int(b)): q for q, (a, b) in enumerate(pairs)}
    kept = [num_jobs + index[(int(a), int(b))] for a, b in inputs.pairs]
    assert np.allclose(ours, np.concatenate([theirs[:num_jobs], theirs[kept]]), atol=1e-4)
    zero_rate = np.ones(len(pairs), dtype=bool)
    zero_rate[np.array(kept) - num_jobs] = False
    assert theirs[num_jobs:][zero_rate].sum() > 0.05
    assert full[num_jobs:].sum() + full[:num_jobs].sum() > ours.sum() + 0.05


def _time_with_partner_class(x: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
    """Per job, partner class and type: the summed time of the job's pairs ``(J, C, T)``."""
    num_jobs, num_types = inputs.throughputs.shape
    classes = inputs.job_classes
    out = np.zeros((num_jobs, int(classes.max()) + 1, num_types))
    for p, (a, b) in enumerate(inputs.pairs):
        out[a, classes[b]] += x[num_jobs + p]
        out[b, classes[a]] += x[num_jobs + p]
    return out


@pytest.mark.parametrize("solver", ["CLARABEL", "HIGHS"])
def test_the_interval_split_is_the_even_splits_optimum_on_fewer_pairs(solver: str) -> None:
    """pair_split='intervals' gives every job the even split's time alone and with each
    partner class on each type (so the same effective throughputs and the same optimum), is
    feasible in the LP over every job pair, and uses fewer job pairs."""
    inputs = _inputs()
    even = packed_max_min_allocation(inputs, solver)
    intervals = packed_max_min_allocation(inputs, solver, pair_split="intervals")
    assert even is not None and intervals is not None
    _assert_feasible(intervals, inputs)
    num_jobs = inputs.num_jobs
    assert np.array_equal(intervals[:num_jobs], even[:num_jobs])
    assert np.allclose(_time_with_partner_class(intervals, inputs),
                       _time_with_partner_class(even, inputs), rtol=1e-9, atol=1e-12)
    assert np.allclose(_normalised_throughputs(intervals, inputs),
                       _normalised_throughputs(even, inputs), rtol=1e-9)
    used_even = int((even[num_jobs:].max(axis=1) > 1e-9).sum())
    used_intervals = int((intervals[num_jobs:].max(axis=1) > 1e-9).sum())
    assert 0 < used_intervals < used_even


def test_interval_pairs_are_a_transport_plan_on_few_pairs() -> None:
    """Each of n supplies sends 1/n and each of m demands receives 1/m, on at most n + m - 1
    pairs, every weight positive."""
    from bayes_sched.policies.gavel.packing import interval_pairs

    for n, m in [(1, 1), (1, 5), (4, 6), (7, 3), (12, 12), (5, 8)]:
        i, k, weight = interval_pairs(n, m)
        assert np.all(weight > 0) and len(weight) <= n + m - 1
        assert np.allclose(np.bincount(i, weight, minlength=n), 1.0 / n)
        assert np.allclose(np.bincount(k, weight, minlength=m), 1.0 / m)


def test_pairs_are_every_two_jobs_that_may_share() -> None:
    """The mechanism's candidate pairs (built only among jobs whose class can pair) are, in
    order, every two jobs of one scale factor that the table lets share some type where
    both run; the 2-GPU jobs (zero pair rates in Gavel's table) are in none."""
    inputs = _inputs()
    names = inputs.names
    kinds = [(t if isinstance(t, tuple) else (t, 1)) for t in
             (JOB_TYPES[int(name)] for name in names)]  # rows in submission order
    types = ("v100", "p100", "k80")
    expected = []
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            if kinds[a][1] != kinds[b][1]:
                continue
            if any(inputs.throughputs[a, t] > 0 and inputs.throughputs[b, t] > 0
                   and min(TABLE.pair_steps_per_second(gpu, kinds[a], kinds[b]) or (0.0,)) > 0
                   for t, gpu in enumerate(types)):
                expected.append([a, b])
    assert inputs.pairs.tolist() == expected
    multi = np.flatnonzero(inputs.scale_factors > 1)
    assert len(multi) == 2 and not np.isin(inputs.pairs, multi).any()
