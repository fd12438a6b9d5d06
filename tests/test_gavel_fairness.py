"""The rest of Gavel's policies on small real table worlds: space sharing (only measured pairs,
a missing pair logged and skipped, the world runs a pair at its pair rates), finish-time fairness
(equal finish-time ratios on a case solved by hand), min total duration (Gavel's horizon), the
FIFO variants (every type used, the queue blocks, packing only pairs that pay), and failures that
keep the previous allocation."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import brentq

from bayes_sched.cluster import ClusterState, PackedAllocations, validate_allocations
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import AllocationError, InputError
from bayes_sched.mechanisms.pop import solve_partitioned
from bayes_sched.mechanisms.time_fraction_lp import ConicProgram, solve_program
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.min_total_duration import MinTotalDurationPackedPolicy, gavel_horizon
from bayes_sched.policies.gavel.time_sharing import AllocationInputs
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import ThroughputTable, load_gavel_throughputs

TABLE = load_gavel_throughputs()
ORACLE = oracle_estimates(TABLE)  # the truth, as the world's oracle publishes it
ROUND = 360.0
# Single-GPU types whose pairs share a V100 well (summed normalised rate above 1.5).
SMALL = ("ResNet-18 (batch size 16)", "CycleGAN", "A3C", "LM (batch size 5)")


def _spec(text: str):  # noqa: ANN202
    return replace(load_cluster_spec(text), round_interval=ROUND)


def _world(spec_text: str, job_types, steps: float = 1e9):  # noqa: ANN001, ANN202
    spec = _spec(spec_text)
    jobs = [make_job(str(i), 0.0, t, 1, steps) for i, t in enumerate(job_types)]
    return spec, TableCluster(jobs, spec, TABLE)


def test_packed_policy_shares_gpus_only_in_measured_pairs() -> None:
    """Four single-GPU jobs on two V100s under Gavel with space sharing: the decision packs
    pairs (all four run at once), every pair it uses or allocates time to is measured with
    positive rates, and the world runs each packed job at its measured pair rate."""
    spec, world = _world("v100:1x2", SMALL)
    policy = make_policy("max_min_fairness_packed")
    decision = policy.decide(ClusterState(spec=spec, now=ROUND), world.job_views(), ORACLE)
    assert isinstance(decision, PackedAllocations) and len(decision.pairs) == 2
    assert len(decision) == 4  # two GPUs, four jobs running
    types = {v.name: v.application for v in world.job_views()}
    for a, b in policy.pair_fractions():
        rates = TABLE.pair_steps_per_second("v100", (types[a], 1), (types[b], 1))
        assert rates is not None and min(rates) > 0
    world.apply(decision)
    world.advance(ROUND)
    for a, b in decision.pairs:
        rate_a, rate_b = TABLE.pair_steps_per_second("v100", (types[a], 1), (types[b], 1))
        assert world.jobs[a].steps_done == np.floor(rate_a * ROUND)
        assert world.jobs[b].steps_done == np.floor(rate_b * ROUND)
    assert world.timeline_busy[-1].sum() == 2  # a shared GPU is busy once
    assert policy.solver_failures == 0


def test_a_missing_pair_is_logged_and_not_packed(caplog: pytest.LogCaptureFixture) -> None:
    """A table without the ResNet-18 x CycleGAN pair on the V100: the policy names the pair in
    a warning, allocates it no time and still packs the other jobs."""
    key_a, key_b = (SMALL[0], 1), (SMALL[1], 1)
    v100 = {k: v for k, v in TABLE.pairs["v100"].items() if k not in ((key_a, key_b),
                                                                      (key_b, key_a))}
    table = ThroughputTable(TABLE.solo, MappingProxyType({**TABLE.pairs, "v100": v100}))
    spec, world = _world("v100:1x2", SMALL[:3])
    policy = make_policy("max_min_fairness_packed")
    with caplog.at_level(logging.WARNING):
        decision = policy.decide(ClusterState(spec=spec, now=ROUND), world.job_views(),
                                 oracle_estimates(table))  # the oracle knows this table
    assert any(SMALL[0] in r.getMessage() and SMALL[1] in r.getMessage()
               and "not packing" in r.getMessage() for r in caplog.records)
    assert ("0", "1") not in policy.pair_fractions()
    assert decision.pairs and ("0", "1") not in decision.pairs
    world.apply(decision)  # the world accepts it


def test_the_world_rejects_an_unmeasured_or_inconsistent_pair() -> None:
    spec = _spec("v100:1x2")
    jobs = [make_job("a", 0.0, SMALL[0], 1, 1e6), make_job("b", 0.0, SMALL[1], 1, 1e6),
            make_job("r", 0.0, "ResNet-50 (batch size 32)", 1, 1e6),
            make_job("w", 0.0, "ResNet-50 (batch size 128)", 1, 1e6)]
    world = TableCluster(jobs, spec, TABLE)
    one = np.array([1])
    state = ClusterState(spec=spec, now=0.0)
    with pytest.raises(AllocationError, match="'a' and 'b' share GPUs but hold different"):
        validate_allocations(PackedAllocations({"a": one, "b": np.array([2])}, [("a", "b")]),
                             state, ["a", "b"], sharing=True)
    with pytest.raises(AllocationError, match="oversubscribes"):  # no sharing without pairs
        world.apply({"a": np.array([2]), "b": np.array([1])})
    # The two ResNet-50s do not fit in a V100's memory together (Gavel's table marks it): that
    # pair launches and fails (tests/test_pair_fits.py); a pair the table lacks is refused there.
    world.apply(PackedAllocations({"a": one, "b": one}, [("a", "b")]))


@pytest.mark.parametrize("name", ["finish_time_fairness", "finish_time_fairness_perf"])
def test_finish_time_fairness_equalises_the_ratios(name: str) -> None:
    """Two jobs of one type on one V100, 1800 s old, 4x apart in remaining steps. Isolated, each
    has the whole GPU (Gavel's IsolatedPolicy scales the 1/n split up until the largest row sums
    to 1: rate r), so rho_j = (t + R_j / (r x_j)) / (R_j / r); FTF gives the x_A + x_B = 1 that
    equalises them, found here by root finding."""
    rate = TABLE.steps_per_second(SMALL[0], 1, "v100")
    assert rate is not None
    spec = _spec("v100:1x1")
    steps = (2000.0 * rate, 8000.0 * rate)
    jobs = [make_job(str(i), 0.0, SMALL[0], 1, s) for i, s in enumerate(steps)]
    views = [replace(v, age=1800.0) for v in TableCluster(jobs, spec, TABLE).job_views()]
    policy = make_policy(name)
    policy.decide(ClusterState(spec=spec, now=1800.0), views, ORACLE)
    x = np.array([policy.fractions()[str(i)]["v100"] for i in range(2)])

    def rho(share: float, remaining: float) -> float:
        return (1800.0 + remaining / (rate * share)) / (remaining / rate)

    expected = brentq(lambda a: rho(a, steps[0]) - rho(1 - a, steps[1]), 1e-6, 1 - 1e-6)
    assert x[0] == pytest.approx(expected, abs=2e-3) and x.sum() == pytest.approx(1, abs=2e-3)
    assert rho(x[0], steps[0]) == pytest.approx(rho(x[1], steps[1]), rel=5e-3)
    assert policy.solver_failures == 0



def test_isolated_share_is_gavels_split_capped_per_row() -> None:
    """The IsolatedPolicy Gavel's FTF calls (``IsolatedPolicy()``, beside its cumulative
    isolated time) caps each row of the 1/n split at 1, as Shockwave's copy does: 3 jobs on
    36 + 36 + 36 GPUs each get 1/3 of every type whatever their scale factor; 300 jobs get
    0.12 / scale factor of each type, a true 1/n share. Gavel's earlier IsolatedPolicy
    (``gavel_largest_row``) divides every row by the largest row sum instead: the 1-GPU job has
    all its time (1/3 on each type), the others 1/2 and 1/8 of it, whether 3 or 300 jobs."""
    from bayes_sched.policies.gavel.finish_time_fairness import isolated_throughputs

    capacities = np.array([36.0, 36.0, 36.0])
    rates = np.array([[3.0, 2.0, 1.0], [6.0, 4.0, 2.0], [24.0, 16.0, 8.0]])
    for copies, expected in ((1, [2.0, 4.0, 16.0]), (100, [0.72, 0.72, 0.72])):
        sizes = np.repeat([1.0, 2.0, 8.0], copies)
        for rule in ("gavel", "shockwave"):
            got = isolated_throughputs(np.repeat(rates, copies, axis=0), sizes, capacities,
                                       rule)
            assert np.allclose(got[::copies], expected)
        assert np.allclose(isolated_throughputs(np.repeat(rates, copies, axis=0), sizes,
                                                capacities)[::copies], expected)
        got = isolated_throughputs(np.repeat(rates, copies, axis=0), sizes, capacities,
                                   "gavel_largest_row")
        assert np.allclose(got[::copies], [2.0, 2.0, 2.0])
    assert isolated_throughputs(np.zeros((0, 3)), np.zeros(0), capacities).shape == (0,)
    assert make_policy("finish_time_fairness").isolated_share == "gavel"
    assert make_policy("finish_time_fairness_perf", isolated_share="shockwave").isolated_share \
        == "shockwave"
    assert make_policy("finish_time_fairness_perf",
                       isolated_share="gavel_largest_row").isolated_share == "gavel_largest_row"
    with pytest.raises(InputError, match="isolated_share"):
        make_policy("finish_time_fairness", isolated_share="themis")


def test_jobs_without_declared_steps_get_an_equal_split() -> None:
    """FTF reads remaining steps; where a job declares none, the time is split equally (Gavel's
    IsolatedPolicy: 1/n of each type's GPUs), logged and counted as a fallback."""
    spec, world = _world("v100:1x1,k80:1x1", SMALL[:2], steps=1e6)
    views = [replace(v, target_steps=None) if v.name == "1" else v for v in world.job_views()]
    policy = make_policy("finish_time_fairness_perf")
    policy.decide(ClusterState(spec=spec, now=ROUND), views, ORACLE)
    assert policy.fallbacks == 1 and policy.solver_failures == 0
    for x in policy.fractions().values():
        assert x == pytest.approx({"v100": 0.5, "k80": 0.5})


def test_min_total_duration_uses_gavel_horizon() -> None:
    """Gavel's bisection ends on a horizon at most 5 % above the shortest; on two jobs sharing
    one V100 the shortest is (R_A + R_B) / r, and the allocation meets every job's rate for the
    bisection's horizon."""
    for shortest in (50.0, 3e3, 7.7e5, 4.2e7):
        horizon = gavel_horizon(shortest)
        assert shortest <= horizon <= 1.05 * max(shortest, 100.0) + 1e-9
    rate = TABLE.steps_per_second(SMALL[0], 1, "v100")
    assert rate is not None
    spec = _spec("v100:1x1")
    steps = (3000.0 * rate, 9000.0 * rate)
    jobs = [make_job(str(i), 0.0, SMALL[0], 1, s) for i, s in enumerate(steps)]
    policy = make_policy("min_total_duration")
    policy.decide(ClusterState(spec=spec, now=ROUND), TableCluster(jobs, spec, TABLE).job_views(),
                  ORACLE)
    x = np.array([policy.fractions()[str(i)]["v100"] for i in range(2)])
    horizon = gavel_horizon(12000.0)
    assert np.all(rate * x >= np.array(steps) / horizon * (1 - 1e-4))
    assert x.sum() <= 1 + 1e-6


def _snapshot_inputs(path: Path) -> AllocationInputs:
    data = np.load(path)
    keys = tuple(zip(data["class_types"].tolist(), data["class_scales"].tolist(), strict=True))
    fields = {k: data[k] for k in data.files if k not in ("class_types", "class_scales")}
    return AllocationInputs(**{**fields, "names": tuple(data["names"].tolist())},
                            class_keys=keys)


def _stored_program(path: Path) -> ConicProgram:
    """A :class:`ConicProgram` saved as arrays (each sparse matrix as CSR ``_data``,
    ``_indices``, ``_indptr`` and ``_shape``)."""
    data = np.load(path)

    def matrix(name: str) -> sp.csr_matrix | None:
        if f"{name}_data" not in data.files:
            return None
        return sp.csr_matrix((data[f"{name}_data"], data[f"{name}_indices"],
                              data[f"{name}_indptr"]), shape=tuple(data[f"{name}_shape"]))

    return ConicProgram(
        cost=data["cost"], upper=matrix("upper"), upper_bound=data["upper_bound"],
        nonnegative=data["nonnegative"], num_entries=int(data["num_entries"]),
        first=matrix("first"), first_offset=data["first_offset"], second=matrix("second"),
        second_offset=data["second_offset"], product=data["product"], equal=matrix("equal"))


def test_a_packed_ftf_program_that_stalled_clarabel_is_solved() -> None:
    """A sub-problem of packed finish-time fairness (100 jobs, 3,014 variables) recorded in a
    300 s Gavel run (``bench_sim_speed.py --gavel-runs --gavel-arrivals stop``, 6,000 jobs):
    CLARABEL with its default factorisation stopped there with ``InsufficientProgress`` (on an
    AMD EPYC), and the policy kept its previous allocation. Its faer factorisation, tried next,
    solves it, to the optimum CLARABEL reaches with other settings (1.14293: without iterative
    refinement, without equilibration, with another regularisation)."""
    program = _stored_program(Path(__file__).parent / "fixtures" / "lp"
                              / "finish_time_fairness_packed_stalled.npz")
    values = solve_program(program, "CLARABEL")
    assert values is not None
    assert float(program.cost @ values) == pytest.approx(1.142931, rel=1e-4)
    entries = values[:program.num_entries]
    assert entries.min() >= -1e-7
    assert np.all(program.upper @ values <= program.upper_bound + 1e-6)


def test_min_total_duration_horizon_does_not_depend_on_the_solver() -> None:
    """A recompute of packed min total duration recorded from Gavel's multi-GPU run (2.6
    jobs/h, seed 0, 13 h in; 15 jobs, 54 pairs). Stated in seconds, its horizon program's
    optimum ``s = 1 / T`` is ~1.7e-6, inside HiGHS's tolerances: HiGHS ended it at 632,982 s
    and CLARABEL at 593,804 s, and Gavel's bisection horizons differed. Stated in units of the
    longest standalone job, both solvers agree to 1e-6, and so do the bisection horizons."""
    inputs = _snapshot_inputs(Path(__file__).parent / "fixtures" / "lp"
                              / "min_total_duration_packed_snapshot.npz")
    highs = MinTotalDurationPackedPolicy().shortest_horizon(inputs)  # HiGHS, no presolve
    clarabel = MinTotalDurationPackedPolicy(horizon_solver="CLARABEL").shortest_horizon(inputs)
    assert highs is not None and clarabel is not None
    assert highs == pytest.approx(clarabel, rel=1e-6)
    assert clarabel == pytest.approx(593_804.6, rel=1e-4)
    assert gavel_horizon(highs) == gavel_horizon(clarabel)


def test_min_total_duration_allocation_does_not_depend_on_the_horizon_solver() -> None:
    """The shortest horizon by HiGHS's simplex (the default) or by CLARABEL: the same Gavel
    horizon, so the same allocation LP and the same allocation, on the recorded snapshot and on
    POP's sub-problems of it."""
    inputs = _snapshot_inputs(Path(__file__).parent / "fixtures" / "lp"
                              / "min_total_duration_packed_snapshot.npz")
    for partitions in (1, 2):
        answers = []
        for horizon_solver in ("HIGHS", "CLARABEL"):
            policy = MinTotalDurationPackedPolicy(horizon_solver=horizon_solver,
                                                  partitions=partitions)
            parts = policy.partitioner.parts(inputs.num_jobs, inputs.capacities,
                                             inputs.job_classes)
            answers.append(policy.allocate_combinations(inputs) if parts is None
                           else solve_partitioned(inputs, parts, policy.allocate_combinations))
        assert answers[0] is not None and answers[1] is not None
        np.testing.assert_array_equal(answers[0], answers[1])
    with pytest.raises(ValueError, match="horizon_solver"):
        MinTotalDurationPackedPolicy(horizon_solver="GLPK")  # type: ignore[arg-type]


def test_fifo_variants() -> None:
    """Eight single-GPU jobs on 2 V100 + 2 P100 + 2 K80: base FIFO uses every type (the drawn
    type, not Gavel's stale V100) and runs the first six; fifo_perf puts jobs in order on the
    fastest type with room; the last two wait (the queue blocks); fifo_packed packs waiting jobs
    only into pairs whose summed normalised rate exceeds 1.5."""
    types = [SMALL[i % 4] for i in range(8)]
    spec, world = _world("v100:1x2,p100:1x2,k80:1x2", types)
    views = world.job_views()
    state = ClusterState(spec=spec, now=ROUND)
    base = make_policy("gavel_fifo", seed=3)
    decision = base.decide(state, views, ORACLE)
    assert sorted(decision) == [str(i) for i in range(6)]
    used = {t: sum(1 for x in base.fractions().values() if x[t] == 1.0) for t in
            ("v100", "p100", "k80")}
    assert used == {"v100": 2, "p100": 2, "k80": 2}
    perf = make_policy("fifo_perf")
    assert sorted(perf.decide(state, views, ORACLE)) == [str(i) for i in range(6)]
    for i in range(6):
        chosen = max(perf.fractions()[str(i)], key=perf.fractions()[str(i)].get)
        room = [t for t in ("k80", "p100", "v100")
                if sum(1 for k in range(i) if perf.fractions()[str(k)][t] == 1.0) < 2]
        best = max(room, key=lambda t: (TABLE.steps_per_second(types[i], 1, t), -ord(t[0])))
        assert chosen == best
    packed = make_policy("fifo_packed")
    decision = packed.decide(state, views, ORACLE)
    for a, b in decision.pairs:
        gpu = spec.gpu_types[int(np.flatnonzero(decision[a])[0])]
        pair = TABLE.pair_steps_per_second(gpu, (types[int(a)], 1), (types[int(b)], 1))
        alone = [TABLE.steps_per_second(types[int(n)], 1, gpu) for n in (a, b)]
        assert pair is not None and pair[0] / alone[0] + pair[1] / alone[1] > 1.5
    assert {"6", "7"} & set(decision) == {n for p in decision.pairs for n in p} & {"6", "7"}


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(InputError, match="packing_threshold"):
        make_policy("fifo_packed", packing_threshold=-1.0)
    with pytest.raises(InputError, match="solver"):
        make_policy("finish_time_fairness_packed", solver="GUROBI")


def test_allox_matches_the_brute_force_optimum_and_does_not_preempt() -> None:
    """Three waiting jobs, one V100 and one K80: AlloX starts the jobs that begin each GPU's
    queue in the order of least total completion time (found here by enumerating every split of
    the jobs over the GPUs, each queue shortest first); a job arriving later preempts none."""
    import itertools

    spec = _spec("v100:1x1,k80:1x1")
    kinds = (SMALL[0], SMALL[1], SMALL[3])
    steps = (4e5, 2e5, 1e5)
    jobs = [make_job(str(i), 0.0, kinds[i], 1, steps[i]) for i in range(3)]
    views = [replace(v, age=100.0 * (3 - i))
             for i, v in enumerate(TableCluster(jobs, spec, TABLE).job_views())]
    best, best_cost = None, np.inf
    for split in itertools.product(("v100", "k80"), repeat=3):
        cost, first = 0.0, {}
        for gpu in ("v100", "k80"):
            times = sorted((steps[i] / TABLE.steps_per_second(kinds[i], 1, gpu), i)
                           for i in range(3) if split[i] == gpu)
            cost += sum(t * (len(times) - k) for k, (t, _) in enumerate(times))
            if times:
                first[gpu] = times[0][1]
        if cost < best_cost:
            best, best_cost = first, cost
    policy = make_policy("allox")
    policy.decide(ClusterState(spec=spec, now=ROUND), views, ORACLE)
    running = {t: int(n) for n, x in policy.fractions().items() for t, v in x.items() if v == 1}
    assert running == best
    late = TableCluster([make_job("9", 0.0, kinds[2], 1, 10.0)], spec, TABLE).job_views()
    policy.decide(ClusterState(spec=spec, now=ROUND * 10), [*views, *late], ORACLE)
    again = {t: int(n) for n, x in policy.fractions().items() for t, v in x.items() if v == 1}
    assert all(again[t] == n for t, n in best.items())  # no preemption
    assert policy.solver_failures == 0


def test_allox_gives_multi_gpu_jobs_one_gpu_of_time_and_keeps_matching_them() -> None:
    """Shockwave's AlloX (its published row): a job of s GPUs that starts a GPU's queue gets
    fraction 1 / s; it never counts as placed (its fractions do not sum to 1), so it keeps its
    fraction and its GPUs stay in the later matchings; single-GPU jobs are held as before."""
    spec = _spec("v100:1x4")
    kinds = ("ResNet-18 (batch size 16)", SMALL[0], SMALL[3])
    jobs = [make_job("0", 0.0, kinds[0], 4, 1e5), make_job("1", 0.0, kinds[1], 1, 2e5),
            make_job("2", 0.0, kinds[2], 1, 1e5)]
    views = [replace(v, age=100.0 * (3 - i))
             for i, v in enumerate(TableCluster(jobs, spec, TABLE).job_views())]
    policy = make_policy("allox", min_reset_interval=0.0)
    policy.decide(ClusterState(spec=spec, now=ROUND), views, ORACLE)
    first = {n: x["v100"] for n, x in policy.fractions().items()}
    assert first == {"0": 0.25, "1": 1.0, "2": 1.0}
    assert policy.fallbacks == 0
    late = [replace(v, name="3", submit_time=ROUND, age=1.0) for v in
            TableCluster([make_job("3", 0.0, kinds[2], 1, 1e4)], spec, TABLE).job_views()]
    policy.decide(ClusterState(spec=spec, now=2 * ROUND), [*views, *late], ORACLE)
    again = {n: x["v100"] for n, x in policy.fractions().items()}
    # Two GPUs are free (jobs 1 and 2 hold theirs): job 3 gets one, job 0 keeps its 1/4.
    assert again == {"0": 0.25, "1": 1.0, "2": 1.0, "3": 1.0}


def test_gandiva_splits_equally_then_packs_same_scale_factor_pairs() -> None:
    spec, world = _world("v100:1x2,k80:1x2", SMALL)
    state = ClusterState(spec=spec, now=ROUND)
    policy = make_policy("gandiva", seed=1)
    policy.decide(state, world.job_views(), ORACLE)
    for x in policy.fractions().values():  # four jobs, four GPUs: 1/4 of each type's two
        assert x == pytest.approx({"v100": 0.5, "k80": 0.5})
    assert not policy.pair_fractions()
    kinds = [SMALL[i % 4] for i in range(6)] + ["ResNet-50 (batch size 32)"] * 2
    jobs = [make_job(str(i), 0.0, t, 2 if i >= 6 else 1, 1e9) for i, t in enumerate(kinds)]
    views = TableCluster(jobs, _spec("v100:1x2,k80:1x2"), TABLE).job_views()
    pairs = []
    for _ in range(2):  # the same seed draws the same pairs
        policy = make_policy("gandiva", seed=7)
        policy.decide(state, views, ORACLE)
        pairs.append(sorted(policy.pair_fractions()))
    assert pairs[0] == pairs[1] and pairs[0]
    sizes = {v.name: v.requested_replicas for v in views}
    assert all(sizes[a] == sizes[b] for a, b in pairs[0])
    members = [n for p in pairs[0] for n in p]
    assert len(members) == len(set(members))


def test_finish_time_fairness_solves_a_loaded_snapshot() -> None:
    """180 multi-GPU jobs of Gavel's generator, ages up to 100 h and random progress, on 36 GPUs
    of each type (a state of the 2.6 jobs/h run): the agnostic FTF program solves (stated in
    seconds and steps CLARABEL stopped here with InsufficientProgress) and its worst ratio is
    the optimum of the program as Gavel states it in cvxpy."""
    from itertools import islice

    import cvxpy as cp

    from bayes_sched.policies.gavel.finish_time_fairness import (
        FinishTimeFairnessPolicy,
        isolated_throughputs,
    )
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs

    rng = np.random.default_rng(0)
    spec = _spec("v100:36,p100:36,k80:36")
    jobs = [replace(job, submit_time=0.0)
            for job in islice(generate_continuous_jobs(2.6, 0, True), 180)]
    views = [replace(v, age=float(rng.uniform(0, 100 * 3600)),
                     progress=float(rng.uniform(0, 0.9)) * float(v.target_steps or 0))
             for v in TableCluster(jobs, spec, TABLE).job_views()]
    seen: list[AllocationInputs] = []

    class Capture(FinishTimeFairnessPolicy):
        def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
            seen.append(inputs)
            return super().allocate_combinations(inputs)

    policy = Capture()
    policy.decide(ClusterState(spec=spec, now=360000.0), views, ORACLE)
    assert policy.solver_failures == 0
    inputs = seen[0]
    rates = policy._rates(inputs)
    remaining, elapsed = inputs.remaining_steps, inputs.elapsed
    denominator = remaining / isolated_throughputs(rates, inputs.scale_factors,
                                                   inputs.capacities)
    ours = np.array([[policy.fractions()[n][t] for t in policy._types] for n in inputs.names])
    worst = ((elapsed + remaining / (rates * ours).sum(axis=1)) / denominator).max()
    x = cp.Variable(rates.shape)
    ratios = [(elapsed[i] + remaining[i] * cp.inv_pos(rates[i] @ x[i])) / denominator[i]
              for i in range(len(rates))]
    reference = cp.Problem(cp.Minimize(cp.maximum(*ratios)), [
        x >= 0, cp.sum(x, axis=1) <= 1,
        cp.sum(cp.multiply(inputs.scale_factors[:, None], x), axis=0) <= inputs.capacities])
    reference.solve(solver="CLARABEL")
    assert worst == pytest.approx(reference.value, rel=1e-5)


def test_gavel_statement_cone_data_is_what_cvxpy_hands_ecos() -> None:
    """FTF's program as Gavel states it (``gavel_statement_problem``, Gavel's cvxpy form): the
    cone data built directly is, bitwise, what cvxpy's canonicalisation hands ECOS (2 and 7
    jobs, a zero rate included: no entry), so ECOS sees the very numbers it saw in Gavel."""
    import cvxpy as cp

    from bayes_sched.policies.gavel.finish_time_fairness import (
        gavel_statement_cone_data,
        gavel_statement_problem,
    )

    rng = np.random.default_rng(3)
    for num_jobs in (2, 7):
        rates = rng.uniform(0.1, 10.0, (num_jobs, 3))
        rates[0, 1] = 0.0
        args = (rates, rng.choice([1.0, 2.0, 4.0], num_jobs), np.array([8.0, 8.0, 8.0]),
                rng.uniform(0, 3e5, num_jobs), rng.uniform(1e3, 1e6, num_jobs),
                rng.uniform(0, 1e5, num_jobs), rng.uniform(0.01, 1.0, num_jobs))
        problem, _ = gavel_statement_problem(*args)
        data, _, _ = problem.get_problem_data(cp.ECOS)
        c, G, h, dims = gavel_statement_cone_data(*args)
        expected = data["G"].tocsc()
        assert np.array_equal(c, data["c"]) and np.array_equal(h, data["h"])
        assert G.shape == expected.shape and np.array_equal(G.indptr, expected.indptr)
        assert np.array_equal(G.indices, expected.indices)
        assert np.array_equal(G.data, expected.data)
        assert dims["l"] == data["dims"].nonneg and dims["q"] == list(data["dims"].soc)
        assert data["A"] is None or data["A"].shape[0] == 0


@pytest.mark.parametrize("name", ["finish_time_fairness", "finish_time_fairness_perf"])
def test_gavel_statement_reaches_the_worst_ratio_optimum(name: str) -> None:
    """``gavel_statement=true`` (Gavel's statement, ECOS) on a hand-built snapshot (7 jobs of
    1, 2 and 4 GPUs on 4 V100 + 4 P100 + 4 K80, ages and progress set by hand): a feasible
    allocation whose worst finish-time ratio is the optimum of an independent statement (the
    default scaled cones under CLARABEL), computed here from the fractions with the isolated
    share written out (1/n of each type's GPUs over the scale factor, each row capped at 1)."""
    from bayes_sched.policies import POLICIES

    spec = _spec("v100:1x4,p100:1x4,k80:1x4")
    kinds = [(SMALL[0], 1), ("ResNet-50 (batch size 32)", 2), (SMALL[1], 1),
             ("Transformer (batch size 64)", 4), (SMALL[2], 1), ("ResNet-50 (batch size 64)", 1),
             ("LM (batch size 20)", 2)]
    jobs = [make_job(str(i), 0.0, kind, size, 4e5) for i, (kind, size) in enumerate(kinds)]
    views = [replace(v, age=600.0 * (i + 1), progress=3e4 * i)
             for i, v in enumerate(TableCluster(jobs, spec, TABLE).job_views())]
    state = ClusterState(spec=spec, now=5000.0)
    options = POLICIES.parse(name, ["gavel_statement=true"], "--policy-opt")
    assert options == {"gavel_statement": True}
    worst = []
    for policy in (make_policy(name, **options), make_policy(name)):
        policy.decide(state, views, ORACLE)
        assert policy.solver_failures == 0 and policy.fallbacks == 0
        types = policy._types
        x = np.array([[policy.fractions()[v.name][t] for t in types] for v in views])
        rates = np.array([[TABLE.steps_per_second(v.application, v.requested_replicas, t)
                           or 0.0 for t in types] for v in views])
        if name == "finish_time_fairness":  # every type at the job's V100 rate
            rates = np.repeat(rates[:, :1], 3, axis=1)
        sizes = np.array([float(v.requested_replicas) for v in views])
        assert np.all(x.sum(axis=1) <= 1 + 1e-6) and np.all(sizes @ x <= 4 + 1e-6)
        share = 4.0 / len(views) / sizes[:, None] * np.ones((1, 3))
        isolated = (rates * share / np.maximum(share.sum(axis=1), 1.0)[:, None]).sum(axis=1)
        remaining = np.array([4e5 - v.progress for v in views])
        ages = np.array([v.age for v in views])
        worst.append(((ages + remaining / (rates * x).sum(axis=1))
                      / (remaining / isolated)).max())
    assert worst[0] == pytest.approx(worst[1], rel=1e-4)
    with pytest.raises(InputError, match="gavel_statement"):
        make_policy("finish_time_fairness_packed", gavel_statement=True)


def test_gavel_statement_one_job_takes_the_cluster() -> None:
    """One job alone: Gavel minimises its ratio itself (no maximum; cvxpy states that case):
    the job gets all its time, and nothing fails."""
    spec, world = _world("v100:1x1,k80:1x1", SMALL[:1], steps=1e6)
    policy = make_policy("finish_time_fairness_perf", gavel_statement=True)
    policy.decide(ClusterState(spec=spec, now=ROUND), world.job_views(), ORACLE)
    assert policy.solver_failures == 0
    assert sum(policy.fractions()["0"].values()) == pytest.approx(1.0, abs=1e-6)


def test_fidelity_script_runs_ftf_with_gavels_statement() -> None:
    """``experiments/gavel_fidelity.py --policy-opt gavel_statement=true`` (a subprocess, jobs
    0-2 of the 2.0 jobs/h multi-GPU stream): the option reaches the policy, its LPs go to ECOS
    and the row reports the solves, failures and inaccurate exits."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "experiments" / "gavel_fidelity.py"), "--multi-gpu",
         "--rates", "2.0", "--policies", "finish_time_fairness_perf", "--window", "0", "3",
         "--policy-opt", "gavel_statement=true", "--json"],
        capture_output=True, text=True, timeout=300, check=True, cwd=root)
    (row,) = json.loads(done.stdout)
    assert row["policy"] == "finish_time_fairness_perf gavel_statement=true"
    assert row["solver"] == "ECOS" and row["lp_solves"] > 0 and row["lp_failures"] == 0
    assert row["lp_inaccurate"] >= 0 and row["avg_jct_h"] > 0
