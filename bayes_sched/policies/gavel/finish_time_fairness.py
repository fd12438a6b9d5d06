"""Finish-time fairness (Themis, Mahajan et al., NSDI 2020) as Gavel formulates it: heterogeneity-
agnostic, -aware and with space sharing.

Gavel's ``scheduler/policies/finish_time_fairness.py``: each job's finish-time ratio ``rho`` is its
expected completion time under the allocation over its expected completion time had it run on an
isolated 1/n share of the cluster, and the LP minimises the largest ratio::

    rho_j = (t_j + R_j / (throughput_j . x_j)) / (I_j + R_j / isolated_j)

with ``t_j`` seconds since submission, ``R_j`` steps remaining (the ``remaining_steps`` estimate,
by default the user's declared steps minus the steps done),
``isolated_j`` the job's steps/s on its isolated share (Gavel's ``IsolatedPolicy``
as its FTF calls it: ``x[j, t] = (GPUs of t / n) / scale factor``, each row capped at 1, a true
1/n share of the cluster; :func:`isolated_throughputs`),
and ``I_j`` the time the job would have spent in isolation so far (each recomputation adds
the steps done since the last one over the isolated rate then). It is convex: ``minimise r`` subject
to ``(throughput_j . x_j) * (r * (I_j + R_j / isolated_j) - t_j) >= R_j``, a rotated second-order
cone per job (an SOCP; CLARABEL solves it, HiGHS cannot). Unknown remaining steps: the time is
split equally (Gavel's fallback when its FTF LP has no answer), logged and counted. The
heterogeneity-agnostic form (Gavel's ``finish_time_fairness``) gives each job its V100 rate on every
type (Gavel hard-codes the V100); the aware form (``finish_time_fairness_perf``) uses the measured
rates; the packed form (``finish_time_fairness_packed``) sums a job's rates over the combinations it
is in (:mod:`bayes_sched.policies.gavel.packing`; solved over (job, partner class) entries,
:func:`~bayes_sched.policies.gavel.packing.partner_class_terms`, the same optimum as over every job
pair). Gavel's packed form divides the packed rates by
each job's summed rates while ``isolated_j`` stays in steps/s; here both are in steps/s.

**Gavel's statement** (``gavel_statement=True``, agnostic and aware forms). The program has a
wide optimal face (its optimum pins only the worst job's ratio), and which point a solver
returns moves the average JCT by tens of percent. With this option the program is Gavel's own:
``FinishTimeFairnessPolicyWithPerf.get_allocation`` states ``minimise maximum_j (t_j + R_j *
inv_pos(rates_j . x_j)) / (I_j + R_j / isolated_j)`` over a ``(J, T)`` variable with the jobs
in id order and the types by name, and cvxpy hands it to ECOS (Gavel's default solver).
:func:`gavel_statement_problem` is that cvxpy statement; :func:`gavel_statement_cone_data`
builds the cone data cvxpy derives from it directly (bitwise the same, at a small fraction of
cvxpy's canonicalisation cost per recomputation), and
:func:`solve_gavel_statement` calls ECOS as cvxpy does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import scipy.sparse as sp

from bayes_sched.mechanisms.pop import GroupSetting, PartitionSetting, WorkerSetting
from bayes_sched.mechanisms.time_fraction_lp import (
    dense_terms,
    min_max_ratio_program,
    solve_program,
)
from bayes_sched.policies.gavel.packing import PackedLayout, packed_layout
from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy, equal_split

if TYPE_CHECKING:
    import cvxpy as cp

LOG = logging.getLogger(__name__)

#: The GPU type whose rate Gavel's heterogeneity-agnostic FTF gives every type (its newest
#: ``finish_time_fairness.py``, ``cfae01cb``). Earlier versions gave every type the rate 1.0 (up
#: to PR #139, April 2020, before the paper was submitted); the K80 cannot be the reference of a
#: multi-GPU run: Gavel's table gives ResNet-50 (batch size 128) on 2, 4 and 8 K80s 0 steps/s.
AGNOSTIC_REFERENCE_GPU = "v100"


#: Which ``IsolatedPolicy`` gives the isolated share. ``"gavel"``: the one Gavel's FTF calls
#: (``stanford-futuredata/gavel`` ``scheduler/policies/isolated.py``, the version without a solver
#: argument that ``finish_time_fairness.py`` constructs as ``IsolatedPolicy()`` beside its
#: cumulative isolated time): each row of the 1/n split capped at 1. ``"shockwave"``: Shockwave's
#: copy of it (``uw-mad-dash/shockwave``), the same rule. ``"gavel_largest_row"``: an earlier
#: Gavel ``IsolatedPolicy`` (``IsolatedPolicy(solver)``, used then by max-min fairness, which now
#: uses ``ProportionalPolicy``) that divides every row by the largest row sum (one scalar).
IsolatedRule = Literal["gavel", "shockwave", "gavel_largest_row"]
ISOLATED_RULES: tuple[IsolatedRule, ...] = ("gavel", "shockwave", "gavel_largest_row")


def isolated_throughputs(throughputs: np.ndarray, scale_factors: np.ndarray,
                         capacities: np.ndarray, rule: IsolatedRule = "gavel") -> np.ndarray:
    """Steps/s of each job on its isolated share, ``(J,)``: Gavel's ``IsolatedPolicy``,
    ``x[j, t] = (GPUs of t / n) / scale factor`` with each row capped at 1 (:func:`equal_split`;
    ``rule`` ``"gavel"`` or ``"shockwave"``). ``rule="gavel_largest_row"``: Gavel's earlier
    ``IsolatedPolicy``, *every* row divided by the largest row sum (one scalar, so the jobs of
    the smallest scale factor get all their time whatever the number of jobs ``n``, and a job
    of scale factor ``s`` gets ``s_min / s`` of it)."""
    if not len(scale_factors):
        return np.zeros(0)
    if rule != "gavel_largest_row":
        return (throughputs * equal_split(scale_factors, capacities)).sum(axis=1)
    share = capacities[None, :] / scale_factors[:, None]  # the 1 / n cancels in the scaling
    return (throughputs * (share / share.sum(axis=1).max())).sum(axis=1)


def steps_done(inputs: AllocationInputs) -> np.ndarray:
    """Each job's steps done; where the inputs carry none, minus its remaining steps (their
    differences between recomputations are the same where the steps are declared)."""
    return -inputs.remaining_steps if inputs.steps_done is None else inputs.steps_done


class FinishTimeFairnessPolicy(TimeSharingPolicy):
    """Finish-time fairness, heterogeneity-agnostic: every type counts at the job's V100 rate.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, and
    ``isolated_share``: whose isolated share is the ratio's reference (:func:`isolated_throughputs`:
    ``"gavel"``, ``"shockwave"`` as Shockwave's baselines ran (the same rule), or Gavel's
    earlier ``"gavel_largest_row"``).
    """

    name = "finish_time_fairness"
    needs: tuple[str, ...] = ("throughput", "remaining_steps")
    default_estimators: ClassVar[Mapping[str, str]] = {"throughput": "oracle",
                                                       "remaining_steps": "declared"}
    heterogeneity_aware = False
    partitionable = True
    jobs_per_partition = 2048

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 isolated_share: IsolatedRule = "gavel", gavel_statement: bool = False,
                 partitions: PartitionSetting = "auto",
                 partition_workers: WorkerSetting = 1,
                 partition_groups: GroupSetting = "redrawn") -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition, partitions=partitions,
                         partition_workers=partition_workers, partition_groups=partition_groups)
        if isolated_share not in ISOLATED_RULES:
            raise ValueError(f"isolated_share is {isolated_share!r}: expected one of "
                             + ", ".join(repr(rule) for rule in ISOLATED_RULES))
        self.isolated_share: IsolatedRule = isolated_share
        if gavel_statement and self.packing:
            raise ValueError("gavel_statement is for finish_time_fairness and "
                             "finish_time_fairness_perf (Gavel's statement of those programs)")
        #: State the program as Gavel's code does and solve it with ECOS, Gavel's default
        #: solver (:func:`solve_gavel_statement`); ``solver`` is then unused.
        self.gavel_statement = bool(gavel_statement)
        #: Solves ECOS ended "optimal but inaccurate" (used, as Gavel uses them).
        self.inaccurate_solves = 0

    def stats(self) -> Mapping[str, float]:
        """The time-sharing figures and ``lp_inaccurate`` (ECOS solves ended "optimal but
        inaccurate", with ``gavel_statement``)."""
        return {**super().stats(), "lp_inaccurate": int(self.inaccurate_solves)}

    def sub_problems_commute(self) -> bool:
        """True: the isolated time is kept per job. (Gavel's statement counts its inaccurate
        solves in one counter, and ECOS is called in this process: false.)"""
        return not self.gavel_statement

    def _reset_state(self, types: tuple[str, ...]) -> None:
        super()._reset_state(types)
        # Per job: remaining steps and isolated steps/s at the last recomputation; the time it
        # would have spent in isolation so far.
        self._previous: dict[str, tuple[float, float]] = {}
        self._isolated_time: dict[str, float] = {}

    def _rates(self, inputs: AllocationInputs) -> np.ndarray:
        if self.heterogeneity_aware or AGNOSTIC_REFERENCE_GPU not in self._types:
            return inputs.throughputs
        reference = inputs.throughputs[:, self._types.index(AGNOSTIC_REFERENCE_GPU)]
        return np.repeat(reference[:, None], len(self._types), axis=1)

    def _isolated_terms(self, names: tuple[str, ...], done: np.ndarray, rates: np.ndarray,
                        scale_factors: np.ndarray, capacities: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
        """``(I, isolated)`` per job: the time each would have spent in isolation so far and
        its isolated steps/s now (updating the isolated time, as Gavel's FTF does on every
        recomputation, with the steps ``done`` since the last one; Gavel takes them as the
        fall in remaining steps, the same where those are declared)."""
        isolated = isolated_throughputs(rates, scale_factors, capacities, self.isolated_share)
        # Kept per job, not replaced per call: under POP each sub-problem's jobs are updated
        # by their own call (the jobs of one recomputation's calls are disjoint).
        previous = self._previous
        for j, name in enumerate(names):
            before = previous.get(name)
            if before is not None and before[1] > 0:
                self._isolated_time[name] = (self._isolated_time.get(name, 0.0)
                                             + (done[j] - before[0]) / before[1])
            self._previous[name] = (float(done[j]), float(isolated[j]))
        return np.array([self._isolated_time.get(name, 0.0) for name in names]), isolated

    def _ratio_terms(self, inputs: AllocationInputs, rates: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(t, R, denominator)`` per job, updating the isolated time."""
        remaining = inputs.remaining_steps
        spent, isolated = self._isolated_terms(inputs.names, steps_done(inputs), rates,
                                               inputs.scale_factors, inputs.capacities)
        denominator = spent + remaining / np.maximum(isolated, 1e-12)
        return inputs.elapsed, remaining, np.maximum(denominator, 1e-9)

    def _layout(self, inputs: AllocationInputs, rates: np.ndarray) -> PackedLayout:
        return PackedLayout.of(dense_terms(rates, inputs.scale_factors))

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        fallback = self.undeclared_fallback(inputs)
        if fallback is not None:
            return fallback
        rates = self._rates(inputs)
        if self.gavel_statement:
            return self._gavel_statement_allocation(inputs, rates)
        elapsed, remaining, denominator = self._ratio_terms(inputs, rates)
        layout = self._layout(inputs, rates)
        values = solve_program(min_max_ratio_program(layout.terms, inputs.capacities, elapsed,
                                                     remaining, denominator), self.solver)
        return None if values is None else layout.expand(values, inputs)

    def _gavel_statement_allocation(self, inputs: AllocationInputs, rates: np.ndarray
                                    ) -> np.ndarray | None:
        """The allocation of Gavel's statement under ECOS (:func:`solve_gavel_statement`), its
        jobs and types in Gavel's order (job ids ascending, types by name; the isolated share
        and the isolated time computed in that order too). No solution (infeasible): the equal
        split, as Gavel's FTF returns ``IsolatedPolicy``'s allocation; an ECOS error: ``None``
        (the previous allocation is kept and the failure counted, where Gavel stops)."""
        names = inputs.names
        jobs = (np.argsort([int(n) for n in names], kind="stable")
                if all(n.isdigit() for n in names) else np.arange(len(names)))
        types = np.argsort(np.array(self._types), kind="stable")
        rows, columns = np.ix_(jobs, types)
        ordered = rates[rows, columns]
        remaining, scale_factors = inputs.remaining_steps[jobs], inputs.scale_factors[jobs]
        capacities = inputs.capacities[types]
        spent, isolated = self._isolated_terms(tuple(names[j] for j in jobs),
                                               steps_done(inputs)[jobs], ordered, scale_factors,
                                               capacities)
        flag, x = solve_gavel_statement(ordered, scale_factors, capacities,
                                        inputs.elapsed[jobs], remaining, spent, isolated)
        if flag in ECOS_NO_SOLUTION:
            return self.equal_split_fallback(inputs, f"ECOS exit {flag} (no solution)")
        if x is None:
            LOG.warning("policy %s: ECOS exit %d on %d jobs", self.name, flag, len(names))
            return None
        if flag != 0:
            self.inaccurate_solves += 1
        out = np.zeros_like(rates)
        out[rows, columns] = x
        return out


class FinishTimeFairnessPerfPolicy(FinishTimeFairnessPolicy):
    """Finish-time fairness over the measured per-type rates (Gavel's FTF).

    Args: as :class:`FinishTimeFairnessPolicy`.
    """

    name = "finish_time_fairness_perf"
    heterogeneity_aware = True
    __init__ = FinishTimeFairnessPolicy.__init__


class FinishTimeFairnessPackedPolicy(FinishTimeFairnessPolicy):
    """Finish-time fairness with space sharing: a job's rate sums over its combinations.

    Args: as :class:`FinishTimeFairnessPolicy`.
    """

    name = "finish_time_fairness_packed"
    heterogeneity_aware = True
    packing = True
    #: Smaller sub-problems than packed max-min's: this program's solve time grows steeply with
    #: the jobs per sub-problem (a cone per job), so at scale many small sub-problems cost less
    #: than a few large ones (``experiments/bench_pop.py --parts decision``). Splitting also
    #: decided better over whole runs (``experiments/paired_gavel_runs.py``), though one
    #: decision's ratios are alike either way (the program pins only the worst job's;
    #: ``bench_pop.py --parts gap``): over a run, the exact solve's answers moved jobs more
    #: often, and its worst slowdown was higher. The gain is the split's, not that of the
    #: fewer pairs a split allows: one whole program over only the pairs within POP's groups
    #: decided as the exact one did (issue 38's notes). Figures in the results pages.
    jobs_per_partition = 32
    __init__ = FinishTimeFairnessPolicy.__init__

    #: Solve over (job, partner class, type) entries (exact; ``False``: one entry per job pair).
    per_partner_class = True

    def _layout(self, inputs: AllocationInputs, rates: np.ndarray) -> PackedLayout:
        return packed_layout(inputs, self.per_partner_class)


# --- Gavel's own statement of the program (``gavel_statement=True``) ------------------------------

#: ECOS exit flags (``info["exitFlag"]``) cvxpy reads as a solution (optimal, optimal but
#: inaccurate: Gavel uses both, printing a warning for the second) and as infeasible or unbounded
#: (cvxpy leaves ``x.value`` None; Gavel's FTF then returns ``IsolatedPolicy``'s allocation). Any
#: other flag (-1 iteration limit in the cvxpy of Gavel's time, -2/-3/-4/-7 numerics) is
#: cvxpy's ``SolverError``, which stops Gavel's scheduler.
ECOS_SOLVED = (0, 10)
ECOS_NO_SOLUTION = (1, 2, 11, 12)


def gavel_statement_problem(rates: np.ndarray, scale_factors: np.ndarray,
                            capacities: np.ndarray, elapsed: np.ndarray, remaining: np.ndarray,
                            isolated_time: np.ndarray, isolated: np.ndarray
                            ) -> tuple[cp.Problem, cp.Variable]:
    """FTF's program as Gavel's ``FinishTimeFairnessPolicyWithPerf.get_allocation`` states it in
    cvxpy, and its ``(J, T)`` variable: the rows in Gavel's job order and the columns in its
    type order (by name), as the caller gives them.

    Per job ``(t_j + R_j * inv_pos(rates_j . x_j)) / (I_j + R_j / isolated_j)`` (the isolated
    time a length-1 array, as Gavel's ``(J, 1)`` isolated throughputs make it), minimise the
    ``maximum`` of them (the single expression for one job), subject to ``x >= 0``, each
    type's GPUs (``scale factor * x`` summed over jobs) at most its count, each job's time at
    most 1, in that order. Shapes: ``rates`` ``(J, T)``, ``capacities`` ``(T,)``, the rest
    ``(J,)``; seconds, steps, steps/s."""
    import cvxpy as cp

    num_jobs, num_types = rates.shape
    x = cp.Variable((num_jobs, num_types))
    fractions = []
    for i in range(num_jobs):
        throughput = cp.sum(cp.multiply(rates[i], x[i]))
        time_isolated = isolated_time[i] + remaining[i] / isolated[i:i + 1]
        time_allocated = elapsed[i] + remaining[i] * cp.inv_pos(throughput)
        fractions.append(time_allocated / time_isolated)
    objective = cp.Minimize(fractions[0] if num_jobs == 1 else cp.maximum(*fractions))
    sizes = np.repeat(scale_factors[:, None], num_types, axis=1)
    constraints = [x >= 0, cp.sum(cp.multiply(sizes, x), axis=0) <= capacities,
                   cp.sum(x, axis=1) <= 1]
    return cp.Problem(objective, constraints), x


def gavel_statement_cone_data(rates: np.ndarray, scale_factors: np.ndarray,
                              capacities: np.ndarray, elapsed: np.ndarray,
                              remaining: np.ndarray, isolated_time: np.ndarray,
                              isolated: np.ndarray
                              ) -> tuple[np.ndarray, sp.csc_matrix, np.ndarray, dict]:
    """``(c, G, h, dims)``: what cvxpy hands ECOS for :func:`gavel_statement_problem` with two
    jobs or more (``minimise c @ z`` subject to ``h - G z`` in the cones ``dims``), built
    directly: the same numbers (bitwise, ``tests/test_gavel_fairness.py``) without cvxpy's
    ~0.3 s of canonicalisation per recomputation.

    Variables ``z``: the maximum's epigraph ``r``, then ``x`` column by column (``x[j, t]`` at
    ``1 + j + J t``), then one ``s_j >= 1 / (rates_j . x_j)`` per job (``inv_pos``). Rows: the
    ``J`` epigraph rows ``-r + R_j / E_j s_j <= -t_j / E_j`` (cvxpy multiplies by ``1 / E_j``,
    ``E_j = I_j + R_j / isolated_j``), ``-x <= 0``, the ``T`` types' GPUs, the ``J`` jobs'
    time, then per job the second-order cone ``(a + s, a - s, 2)``, ``a = rates_j . x_j``."""
    num_jobs, num_types = rates.shape
    jobs = np.arange(num_jobs)
    x_column = 1 + jobs[:, None] + num_jobs * np.arange(num_types)[None, :]  # (J, T)
    s_column = 1 + num_jobs * num_types + jobs
    inverse = 1.0 / (isolated_time + remaining / isolated)
    epigraph, nonneg = 0, num_jobs
    gpus = nonneg + num_jobs * num_types
    time = gpus + num_types
    cones = time + num_jobs
    rows = [jobs, jobs, nonneg + np.arange(num_jobs * num_types),
            np.broadcast_to(gpus + np.arange(num_types)[None, :], x_column.shape).ravel(),
            np.repeat(time + jobs, num_types),
            np.repeat(cones + 3 * jobs, num_types), cones + 3 * jobs,
            np.repeat(cones + 3 * jobs + 1, num_types), cones + 3 * jobs + 1]
    columns = [np.zeros(num_jobs, dtype=np.int64), s_column, 1 + np.arange(num_jobs * num_types),
               x_column.ravel(), x_column.ravel(), x_column.ravel(), s_column,
               x_column.ravel(), s_column]
    values = [-np.ones(num_jobs), remaining * inverse, -np.ones(num_jobs * num_types),
              np.repeat(scale_factors, num_types), np.ones(num_jobs * num_types),
              -rates.ravel(), -np.ones(num_jobs), -rates.ravel(), np.ones(num_jobs)]
    num_rows = cones + 3 * num_jobs
    num_vars = 1 + num_jobs * num_types + num_jobs
    G = sp.csc_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
                      shape=(num_rows, num_vars))
    G.eliminate_zeros()  # a zero rate is no entry in cvxpy's matrix either
    h = np.zeros(num_rows)
    h[epigraph:nonneg] = -(elapsed * inverse)
    h[gpus:time] = capacities
    h[time:cones] = 1.0
    h[cones + 2::3] = 2.0
    c = np.zeros(num_vars)
    c[0] = 1.0
    return c, G, h, {"l": cones, "q": [3] * num_jobs, "e": 0}


def solve_gavel_statement(rates: np.ndarray, scale_factors: np.ndarray, capacities: np.ndarray,
                          elapsed: np.ndarray, remaining: np.ndarray, isolated_time: np.ndarray,
                          isolated: np.ndarray) -> tuple[int, np.ndarray | None]:
    """ECOS (Gavel's default solver) on :func:`gavel_statement_problem`: ``(exit flag, x)``,
    ``x`` ``(J, T)`` clipped to ``[0, 1]`` as Gavel clips it, ``None`` unless the flag is in
    :data:`ECOS_SOLVED`. ECOS is called as cvxpy calls it (no options but ``verbose=False``)."""
    import ecos

    num_jobs, num_types = rates.shape
    if num_jobs == 1:  # Gavel minimises the lone ratio itself: cvxpy states it (rare, cheap)
        import cvxpy as cp

        problem, x = gavel_statement_problem(rates, scale_factors, capacities, elapsed,
                                             remaining, isolated_time, isolated)
        try:
            problem.solve(solver="ECOS")
        except cp.error.SolverError:
            return -7, None
        flag = {"optimal": 0, "optimal_inaccurate": 10, "infeasible": 1, "unbounded": 2,
                "infeasible_inaccurate": 11, "unbounded_inaccurate": 12}.get(problem.status, -1)
        if flag not in ECOS_SOLVED or x.value is None:
            return flag, None
        return flag, np.clip(x.value, 0.0, 1.0)
    c, G, h, dims = gavel_statement_cone_data(rates, scale_factors, capacities, elapsed,
                                              remaining, isolated_time, isolated)
    solution = ecos.solve(c, G, h, dims, None, None, verbose=False)
    flag = int(solution["info"]["exitFlag"])
    if flag not in ECOS_SOLVED:
        return flag, None
    values = np.asarray(solution["x"])[1:1 + num_jobs * num_types]
    return flag, np.clip(values.reshape((num_jobs, num_types), order="F"), 0.0, 1.0)
