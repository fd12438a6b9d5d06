"""Sia (:mod:`bayes_sched.policies.sia`, its program in :mod:`~bayes_sched.policies.sia_program`):
normalised goodputs, its integer program against brute force, the fast GPU type going to the job
that gains most, capacity, the restart penalty, the swappable throughput belief, and the registry
and command line."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence

import cvxpy as cp
import numpy as np
import pytest

from bayes_sched.cluster import ClusterState, validate_allocations
from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimates import Estimate, Estimates
from bayes_sched.jobs import BatchLimits, JobSettings, JobView
from bayes_sched.mechanisms.highs_process import HIGHS_THREADS
from bayes_sched.policies import POLICIES, make_policy
from bayes_sched.policies.sia import SiaPolicy, config_utilities, normalized_goodputs
from bayes_sched.policies.sia_program import (
    Configurations,
    assignment_highs_data,
    assignment_problem,
    solve_assignment,
)
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.throughput_estimates import THROUGHPUT
from bayes_sched.throughputs import load_gavel_throughputs
from bayes_sched.worlds import TABLE_WORLD_POLICIES
from tests.cli_inprocess import run_cli

FAST_ON_V100 = "ResNet-50 (batch size 64)"  # V100 / K80 = 7.1, V100 / P100 = 1.68 (Gavel's table)
ORACLE = oracle_estimates(load_gavel_throughputs())  # the truth, as the world's oracle
SLOW_GAIN = "A3C"                           # V100 / K80 = 2.09
BARELY_FASTER = "LM (batch size 10)"        # V100 / P100 = 1.06


def _view(cluster: ClusterState, name: str, job_type: str, scale_factor: int = 1, *,
          allocation: Sequence[int] | None = None, submit: float = 0.0, restarts: int = 0,
          attained: float = 0.0) -> JobView:
    return JobView(
        name=name, application=job_type, submit_time=submit, age=cluster.now - submit,
        attained_service=attained,
        allocation=np.array(allocation or [0] * cluster.num_nodes, dtype=np.int64),
        num_restarts=restarts, requested_replicas=scale_factor, requested_batch_size=32,
        settings=JobSettings(32, scale_factor), limits=BatchLimits(1, 1, 1, 1))


def _types_of(cluster: ClusterState, decision: Mapping[str, np.ndarray]) -> dict[str, str]:
    """The one GPU type each job was given."""
    out = {}
    for name, counts in decision.items():
        (gpu_type,) = {cluster.gpu_types[n] for n in np.flatnonzero(counts)}
        out[name] = gpu_type
    return out


def test_normalised_goodput_makes_each_jobs_slowest_configuration_worth_its_gpus() -> None:
    # Job 0: rigid on 4 GPUs, steps/s 2, 6, 4 on three types; job 1: one and two GPUs of a type.
    configs = Configurations(job=np.array([0, 0, 0, 1, 1]), gpu_type=np.array([0, 1, 2, 0, 0]),
                             num_gpus=np.array([4, 4, 4, 1, 2]),
                             goodput=np.array([2.0, 6.0, 4.0, 10.0, 18.0]))
    assert normalized_goodputs(configs, 2) == pytest.approx([4.0, 12.0, 8.0, 1.0, 1.8])


def test_the_ilp_is_optimal_and_within_capacity_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(4):
        num_jobs, capacities = 5, np.array([4, 3])
        job, gpu_type, gpus = [], [], []
        for j in range(num_jobs):
            for t in range(2):
                for g in rng.choice([1, 2, 4], size=int(rng.integers(0, 3)), replace=False):
                    job.append(j), gpu_type.append(t), gpus.append(int(g))
        configs = Configurations(np.array(job), np.array(gpu_type), np.array(gpus),
                                 rng.uniform(1.0, 5.0, len(job)))
        utility = config_utilities(normalized_goodputs(configs, num_jobs), -0.5, 1.1)
        chosen = solve_assignment(utility, configs, capacities, num_jobs)
        assert chosen is not None
        picked = chosen[chosen >= 0]
        assert np.all(configs.job[picked] == np.flatnonzero(chosen >= 0))
        used = np.bincount(configs.gpu_type[picked], configs.num_gpus[picked], minlength=2)
        assert np.all(used <= capacities)
        options = [[-1, *np.flatnonzero(configs.job == j)] for j in range(num_jobs)]
        best = 0.0
        for combo in itertools.product(*options):
            taken = [c for c in combo if c >= 0]
            load = np.bincount(configs.gpu_type[taken], configs.num_gpus[taken], minlength=2)
            if np.all(load <= capacities):
                best = max(best, float(utility[taken].sum()))
        assert utility[picked].sum() == pytest.approx(best, rel=1e-4)


def test_highs_without_its_heuristics_reaches_the_same_optimum() -> None:
    """Sia's default solve (HiGHS's sub-MIP and search heuristics off) against HiGHS with them,
    on seeded programs of Gavel's shape (rigid jobs of 1-8 GPUs, a configuration per type, more
    GPUs asked for than the three types hold): the same optimal objective, within the gap."""
    rng = np.random.default_rng(3)
    on = SiaPolicy(mip_heuristics=True)._solver_options()
    off = SiaPolicy()._solver_options()
    assert on != off
    for _ in range(6):
        num_jobs, capacities = 40, np.array([12, 12, 12])
        scale = rng.choice([1, 1, 1, 2, 4, 8], size=num_jobs)
        job = np.repeat(np.arange(num_jobs), 3)
        configs = Configurations(job, np.tile(np.arange(3), num_jobs), scale[job],
                                 rng.uniform(0.5, 8.0, 3 * num_jobs))
        utility = config_utilities(normalized_goodputs(configs, num_jobs), -0.5, 1.1)
        values = []
        for options in (on, off):
            chosen = solve_assignment(utility, configs, capacities, num_jobs, "HIGHS", options)
            assert chosen is not None and (chosen >= 0).sum() < num_jobs  # the solver ran
            picked = chosen[chosen >= 0]
            used = np.bincount(configs.gpu_type[picked], configs.num_gpus[picked], minlength=3)
            assert np.all(used <= capacities)
            values.append(float(utility[picked].sum()))
        assert values[1] == pytest.approx(values[0], rel=1e-4)


#: SCIP comes with the optional ``scip`` extra (pyscipopt); CI installs only HiGHS.
_SCIP = pytest.param("SCIP", marks=pytest.mark.skipif(
    "SCIP" not in cp.installed_solvers(), reason="pyscipopt (the scip extra) is not installed"))


def test_the_direct_highs_data_equal_cvxpys_and_give_the_same_choice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The integer program of a real round (Gavel's multi-GPU jobs 0-149, all active, on 36 V100
    + 36 P100 + 36 K80: more jobs than GPUs), built directly for HiGHS: every number equals
    cvxpy's ``get_problem_data``, and HiGHS picks the same configurations as through
    ``Problem.solve``."""
    from dataclasses import replace
    from itertools import islice

    import bayes_sched.policies.sia as sia
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.table_cluster import TableCluster
    from bayes_sched.throughputs import load_gavel_throughputs

    spec = replace(load_cluster_spec("v100:36,p100:36,k80:36"), round_interval=360.0)
    jobs = [replace(job, submit_time=0.0)
            for job in islice(generate_continuous_jobs(2.6, 0, multi_gpu=True), 150)]
    views = [replace(v, age=3600.0)
             for v in TableCluster(jobs, spec, load_gavel_throughputs()).job_views()]
    calls: list[tuple] = []
    solve = sia.solve_program

    def recording(*args: object) -> tuple[np.ndarray, float] | None:
        got = solve(*args)  # type: ignore[arg-type]
        calls.append((*args, None if got is None else got[0]))
        return got

    monkeypatch.setattr(sia, "solve_program", recording)
    policy = make_policy("sia")
    policy.decide(ClusterState(spec=spec, now=3600.0), views, ORACLE)
    (utility, configs, capacities, num_jobs, solver, options, chosen), = calls
    assert solver == "HIGHS"
    useful = np.flatnonzero(utility > 0)
    args = (utility[useful], configs.job[useful], configs.gpu_type[useful],
            configs.num_gpus[useful], capacities, num_jobs)
    ours = assignment_highs_data(*args)
    problem, x = assignment_problem(*args)
    theirs = problem.get_problem_data(cp.HIGHS)[0]
    assert ours["c"].tobytes() == theirs["c"].tobytes()
    assert ours["b"].tobytes() == theirs["b"].tobytes()
    for field in ("indptr", "indices", "data"):
        assert getattr(ours["A"], field).tolist() == getattr(theirs["A"], field).tolist()
    assert ours["A"].shape == theirs["A"].shape
    assert ours["lower_bounds"].tobytes() == theirs["lower_bounds"].tobytes()
    assert theirs["upper_bounds"] is None and ours["upper_bounds"] is None
    assert ours["bool_vars_idx"] == theirs["bool_vars_idx"] and not theirs["int_vars_idx"]
    assert (ours["dims"].zero, ours["dims"].nonneg) == (theirs["dims"].zero,
                                                        theirs["dims"].nonneg)
    # Not every job's best configuration fits: the solver ran.
    assert len(calls) == 1 and (chosen >= 0).sum() < num_jobs
    problem.solve(solver="HIGHS", **options, threads=HIGHS_THREADS)
    through_cvxpy = np.full(num_jobs, -1)
    picked = useful[np.round(x.value) > 0.5]
    through_cvxpy[configs.job[picked]] = picked
    assert chosen.tolist() == through_cvxpy.tolist()


@pytest.mark.parametrize("solver", ["HIGHS", _SCIP])
def test_the_fast_type_goes_to_the_job_that_gains_most_from_it(solver: str) -> None:
    """One V100 and one K80: both jobs run faster on the V100; the one gaining 7.1x gets it,
    the one gaining 2.1x the K80, whichever was submitted first (with either solver)."""
    cluster = ClusterState(spec=parse_cluster_spec("v100:1x1,k80:1x1"), now=3600.0)
    jobs = [_view(cluster, "a3c", SLOW_GAIN, submit=0.0),
            _view(cluster, "resnet", FAST_ON_V100, submit=10.0)]
    policy = make_policy("sia", solver=solver)
    decision = policy.decide(cluster, jobs, ORACLE)
    validate_allocations(decision, cluster, [j.name for j in jobs])
    assert _types_of(cluster, decision) == {"resnet": "v100", "a3c": "k80"}
    assert policy.ilp_solves == 1 and policy.solver_failures == 0


def test_a_round_where_every_job_gets_its_best_type_takes_no_solver() -> None:
    """Two V100s: both jobs get the type they gain most on without the integer program, and
    the policy counts no solve (it counts only the rounds that needed the solver)."""
    cluster = ClusterState(spec=parse_cluster_spec("v100:1x2,k80:1x1"), now=3600.0)
    jobs = [_view(cluster, "a3c", SLOW_GAIN, submit=0.0),
            _view(cluster, "resnet", FAST_ON_V100, submit=10.0)]
    policy = make_policy("sia")
    decision = policy.decide(cluster, jobs, ORACLE)
    validate_allocations(decision, cluster, [j.name for j in jobs])
    assert _types_of(cluster, decision) == {"resnet": "v100", "a3c": "v100"}
    assert policy.ilp_solves == 0 and policy.solver_failures == 0
    crowded = ClusterState(spec=parse_cluster_spec("v100:1x1,k80:1x1"), now=3600.0)
    policy.decide(crowded, [_view(crowded, "a3c", SLOW_GAIN, submit=0.0),
                            _view(crowded, "resnet", FAST_ON_V100, submit=10.0)], ORACLE)
    assert policy.ilp_solves == 1


def test_capacity_and_rigid_scale_factors_are_respected_when_jobs_outnumber_gpus() -> None:
    cluster = ClusterState(spec=parse_cluster_spec("v100:2x4,p100:1x4,k80:2x4"), now=7200.0)
    rng = np.random.default_rng(1)
    kinds = (FAST_ON_V100, SLOW_GAIN, BARELY_FASTER, "Recommendation (batch size 512)")
    jobs = [_view(cluster, f"j{i}", kinds[i % 4], int(rng.choice([1, 2, 4, 8])),
                  submit=float(i)) for i in range(14)]
    decision = make_policy("sia").decide(cluster, jobs, ORACLE)
    validate_allocations(decision, cluster, [j.name for j in jobs])
    by_name = {job.name: job for job in jobs}
    types = _types_of(cluster, decision)
    for name, counts in decision.items():
        assert counts.sum() == by_name[name].requested_replicas
    for gpu_type in ("v100", "p100", "k80"):
        used = sum(int(decision[n].sum()) for n, t in types.items() if t == gpu_type)
        assert used <= cluster.gpus_of_type(gpu_type)
    # Sia's no-allocation penalty exceeds any job's term: the GPUs left idle fit no waiting job.
    idle = {t: cluster.gpus_of_type(t) - sum(int(decision[n].sum()) for n, tt in types.items()
                                               if tt == t) for t in ("v100", "p100", "k80")}
    waiting = [job for job in jobs if job.name not in decision]
    assert waiting and all(job.requested_replicas > max(idle.values()) for job in waiting)


def test_the_restart_penalty_keeps_a_running_job_where_the_gain_is_small() -> None:
    """A job on the P100 (age 1 h, 10 restarts of 30 s: factor 0.91) stays when the V100 is
    only 1.06x faster, moves when it is 1.68x faster, and moves at 1.06x while it has barely run
    (fewer GPU-seconds than one restart delay)."""
    cluster = ClusterState(spec=parse_cluster_spec("v100:1x1,p100:1x1"), now=3600.0)
    on_p100 = [0, 1]

    def placed(job_type: str, attained: float) -> str:
        job = _view(cluster, "j", job_type, allocation=on_p100, restarts=10, attained=attained)
        return _types_of(cluster, make_policy("sia").decide(cluster, [job], ORACLE))["j"]

    assert placed(BARELY_FASTER, attained=3000.0) == "p100"
    assert placed(FAST_ON_V100, attained=3000.0) == "v100"
    assert placed(BARELY_FASTER, attained=10.0) == "v100"
    # A job kept where it runs keeps its very GPUs (no restart).
    job = _view(cluster, "j", BARELY_FASTER, allocation=on_p100, restarts=10, attained=3000.0)
    assert make_policy("sia").decide(cluster, [job], ORACLE)["j"].tolist() == on_p100


class _FixedTable:
    """A known table with given steps/s per (job type, GPU type) (``None`` elsewhere), as an
    oracle would publish it."""

    def __init__(self, rates: Mapping[tuple[str, str], float]) -> None:
        self.rates = rates

    def steps_per_second(self, job_type: str, scale_factor: int, gpu_type: str) -> float | None:
        return self.rates.get((job_type, gpu_type))

    def pair_steps_per_second(self, gpu_type: str, a: tuple[str, int], b: tuple[str, int]
                              ) -> tuple[float, float] | None:
        return None


def _known(rates: Mapping[tuple[str, str], float]) -> Estimates:
    return Estimates([Estimate(THROUGHPUT, "oracle", _FixedTable(rates))])


def test_sia_reads_its_throughputs_from_the_rounds_estimate() -> None:
    cluster = ClusterState(spec=parse_cluster_spec("v100:1x1,k80:1x1"), now=600.0)
    job = _view(cluster, "j", SLOW_GAIN)
    policy = SiaPolicy()
    assert _types_of(cluster, policy.decide(cluster, [job], ORACLE)) == {"j": "v100"}  # the table
    known = _known({(SLOW_GAIN, "v100"): 1.0, (SLOW_GAIN, "k80"): 3.0})
    assert _types_of(cluster, policy.decide(cluster, [job], known)) == {"j": "k80"}
    # A job type the table knows on no type runs anywhere; one it cannot run nowhere.
    assert policy.decide(cluster, [job], _known({(SLOW_GAIN, "v100"): 0.0,
                                                 (SLOW_GAIN, "k80"): 0.0})) == {}
    assert len(policy.decide(cluster, [job], _known({}))) == 1
    with pytest.raises(KeyError, match="no estimate of 'throughput' this round"):
        policy.decide(cluster, [job], Estimates())


def test_registry_options_and_bad_values() -> None:
    assert "sia" in POLICIES and "sia" in TABLE_WORLD_POLICIES
    options = POLICIES.options("sia")
    assert options["p"].default == -0.5 and options["lambda_n"].default == 1.1
    policy = make_policy("sia", p=-1.0, lambda_n=2.0, solver="SCIP", acquisition="thompson")
    assert isinstance(policy, SiaPolicy) and (policy.p, policy.lambda_n) == (-1.0, 2.0)
    for bad in ({"p": 0.0}, {"lambda_n": -1.0}, {"solver": "GUROBI"}, {"mip_rel_gap": -1.0}):
        with pytest.raises(InputError, match="sia"):
            make_policy("sia", **bad)


def test_cli_simulates_a_gavel_trace_under_sia() -> None:
    done = run_cli("simulate", "--trace", "small_test", "--cluster", "v100:36,p100:36,k80:36",
                   "--policy", "sia", "--policy-opt", "p=-1", "--seed", "0", "--json",
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["policy"] == "sia" and row["finished"] == row["jobs"] == 20
    assert row["solver_failures"] == 0 and row["round_s"] == 360.0
    bad = run_cli("simulate", "--trace", "small_test", "--policy", "sia", "--policy-opt", "p=0",
                  "--no-progress")
    assert bad.returncode == 2 and "p is 0" in bad.stderr and "Traceback" not in bad.stderr
