"""Shockwave's world: the 12-column trace reader, batch-size schedules worked by hand, the job
physics of batch-size changes, the Dirichlet posterior, and the Shockwave planner on tiny worlds."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.batch_modes import (
    accordion_schedule,
    batch_size_schedule,
    gns_schedule,
    iterations_per_epoch,
)
from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimates import Estimates
from bayes_sched.estimation.choose import choose_estimators
from bayes_sched.estimation.remaining_work import DirichletRegimePredictor
from bayes_sched.jobs import BatchLimits, JobSettings, JobView
from bayes_sched.policies import make_policy
from bayes_sched.policies.shockwave import ShockwavePolicy
from bayes_sched.remaining_work import profile_from
from bayes_sched.sim.fairness import ftf_rho, ftf_summary
from bayes_sched.sim.oracles import world_oracles
from bayes_sched.sim.shockwave_cluster import RESTART_SECONDS, ShockwaveCluster
from bayes_sched.sim.shockwave_jobs import (
    ShockwaveJobSpec,
    read_shockwave_trace,
    shipped_shockwave_trace,
)
from bayes_sched.throughputs import load_shockwave_throughputs
from tests.cli_inprocess import run_cli


def shockwave_estimates(remaining_work: str = "dirichlet") -> Estimates:
    """What a round of Shockwave's world publishes: its tacc table (the oracle) and the
    ``remaining_work`` estimator's predictor."""
    chosen = choose_estimators(ShockwavePolicy.needs, {"remaining_work": remaining_work},
                               ShockwavePolicy.default_estimators,
                               world_oracles(load_shockwave_throughputs()))
    return Estimates(entry for estimator in chosen for entry in estimator.published())


GOOD = ("LM (batch size 10)\tpython3 main.py\tlanguage_modeling\t--steps\t1\t77584\t1\tgns\t1\t"
        "-1.000000\t1418\t0")


# --- the trace reader -----------------------------------------------------------------------------

def test_shipped_trace_reads_its_120_jobs() -> None:
    jobs = read_shockwave_trace(shipped_shockwave_trace("tacc_120"))
    assert len(jobs) == 120
    first = jobs[0]
    assert (first.job_type, first.mode, first.total_steps, first.duration, first.submit_time) \
        == ("LM (batch size 10)", "gns", 134583.0, 1418.0, 0.0)
    assert {job.mode for job in jobs} == {"static", "accordion", "gns"}
    assert all(b.submit_time >= a.submit_time for a, b in zip(jobs, jobs[1:], strict=False))


@pytest.mark.parametrize(("line", "column"), [
    ("\t".join(GOOD.split("\t")[:10]), None),  # Gavel's 10 columns
    (GOOD.replace("\tgns\t", "\tadaptive\t"), "mode"),
    (GOOD.replace("LM (batch size 10)", "NoSuchNet (batch size 10)"), "job_type"),
    (GOOD.replace("LM (batch size 10)", "LM"), "job_type"),  # no batch size
    (GOOD.replace("\t77584\t", "\tmany\t"), "total_steps"),
    (GOOD.replace("\t1418\t", "\t-3\t"), "duration"),
    (GOOD[:-1] + "-5", "arrival_time"),
])
def test_bad_trace_rows_name_file_row_and_column(tmp_path: Path, line: str,
                                                 column: str | None) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(GOOD + "\n" + line + "\n")
    with pytest.raises(InputError) as caught:
        read_shockwave_trace(path)
    message = str(caught.value)
    assert str(path) in message and "row 2" in message and "\n" not in message
    if column is not None:
        assert f"column '{column}'" in message


def test_a_mode_reaching_an_unmeasured_batch_size_is_refused(tmp_path: Path) -> None:
    # Recommendation was measured on one GPU only: at 2 GPUs its type has no throughput.
    path = tmp_path / "rec.trace"
    path.write_text(GOOD.replace("LM (batch size 10)", "Recommendation (batch size 512)")
                    .replace("\t77584\t1\t", "\t77584\t2\t") + "\n")
    with pytest.raises(InputError, match="row 1.*no measured throughput at scale factor 2"):
        read_shockwave_trace(path)


# --- batch-size schedules, worked by hand from Shockwave's utils.py --------------------------------

def test_gns_schedule_doubles_at_its_segments_and_keeps_the_last_epoch() -> None:
    # LM, batch 10, 1 GPU: x2 from epoch 11, x4 from 21, x8 from 41. With 23 epochs the second
    # segment stops one short of the last epoch, which keeps the initial batch (Shockwave's loops).
    assert gns_schedule("LM", 10, 23, 1) == [10] * 11 + [20] * 10 + [40] + [10]
    # One segment reaches the last epoch; the cap (256) holds.
    assert gns_schedule("ResNet-18", 128, 15, 1) == [128] * 11 + [256] * 4
    # Too few epochs, an untabulated scale factor, or Transformer: no change.
    assert gns_schedule("LM", 10, 11, 1) == [10] * 11
    assert gns_schedule("LM", 10, 50, 8) == [10] * 50
    assert gns_schedule("Transformer", 32, 50, 1) == [32] * 50


def test_accordion_schedule_leaves_critical_regimes_and_the_first_30_percent_small() -> None:
    # ResNet-18 at 32: critical epochs 0-9 (and 150-159, 250-259); 30 % of 92 epochs is 27.6.
    assert accordion_schedule("ResNet-18", 32, 92) == [32] * 28 + [256] * 64
    # ResNet-50: the first 10 of every 30 epochs are critical; 30 % of 70 epochs is 21.
    schedule = accordion_schedule("ResNet-50", 32, 70)
    assert schedule[:22] == [32] * 22 and schedule[22:30] == [128] * 8
    assert schedule[30:40] == [32] * 10 and schedule[40:60] == [128] * 20
    assert schedule[60:] == [32] * 10
    assert accordion_schedule("Transformer", 64, 38) == [64] * 38
    assert batch_size_schedule("static", "LM", 10, 5, 1) == [10] * 5


# --- the Dirichlet posterior ----------------------------------------------------------------------

def test_dirichlet_posterior_updates_with_the_observed_epochs() -> None:
    profile = profile_from([10, 10, 20, 20], {10: 10.0, 20: 5.0})
    predictor = DirichletRegimePredictor()
    # Prior 4 / 2 = 2 per regime; epoch 0 (batch 10) observed.
    assert predictor.posterior(profile, 0) == {10: 3.0, 20: 2.0}
    # Rebased to 4 epochs (2.4, 1.6), less the observed one: 1.4 and 1.6 epochs at 10 s and 5 s.
    assert predictor.remaining_seconds(profile, 0) == pytest.approx(1.4 * 10 + 1.6 * 5)
    # Epochs 0-2 observed: (4, 3) -> 16/7 - 2 and 12/7 - 1 epochs left, 2 epochs truly left.
    assert predictor.posterior(profile, 2) == {10: 4.0, 20: 3.0}
    assert predictor.remaining_seconds(profile, 2) == pytest.approx(2 / 7 * 10 + 5 / 7 * 5)
    # One more epoch seen at batch 10 moves the posterior's mass towards it (3/5 -> 4/6).
    share = [p[10] / sum(p.values()) for p in (predictor.posterior(profile, e) for e in (0, 1))]
    assert share == pytest.approx([3 / 5, 4 / 6])
    assert predictor.remaining_seconds(profile, 4) == 1.0  # nothing left: Shockwave's floor


# --- job physics ----------------------------------------------------------------------------------

def _one_gpu_cluster(jobs: list[ShockwaveJobSpec]) -> ShockwaveCluster:
    spec = replace(load_cluster_spec("v100:1x1"), round_interval=120.0)
    return ShockwaveCluster(jobs, spec, load_shockwave_throughputs())


def test_gns_job_doubles_its_batch_and_keeps_its_epochs() -> None:
    (job,) = read_shockwave_trace_text(GOOD)
    assert job.epochs == 13 and iterations_per_epoch("LM", 10) == 5968
    cluster = _one_gpu_cluster([job])
    table = load_shockwave_throughputs()
    rate10 = table.steps_per_second("LM (batch size 10)", 1, "v100")
    assert rate10 is not None
    state = None
    while not cluster.done():
        cluster.apply({"0": np.array([1])})
        cluster.advance(120.0)
        state = cluster.batch["0"]
        if state.batch_size == 20:
            break
    assert state is not None and state.batch_size == 20
    # 13 epochs at ceil(59675 / 20) = 2984 iterations; steps done rounded up to whole epochs.
    assert state.total_steps == 13 * 2984
    done = cluster.jobs["0"].steps_done
    assert done % 2984 == 0 and done / 2984 >= 11
    views = cluster.job_views()
    assert views[0].application == "LM (batch size 20)" and views[0].batch_size_mode == "gns"
    assert views[0].target_epochs == 13
    # The steps declared and done, as Shockwave's scheduler rescales them: what policies that
    # read remaining steps (min total duration, FTF, AlloX) are given.
    assert views[0].target_steps == 13 * 2984 and views[0].progress == done


def test_a_job_that_did_not_run_last_round_loses_its_restart_time() -> None:
    (a,) = read_shockwave_trace_text(GOOD)
    b = replace(a, name="1")
    cluster = _one_gpu_cluster([a, b])
    rate = load_shockwave_throughputs().steps_per_second("LM (batch size 10)", 1, "v100")
    assert rate is not None
    cluster.apply({"0": np.array([1])})
    cluster.advance(120.0)  # the first round of the run: no restart cost
    assert cluster.jobs["0"].steps_done == math.floor(rate * 120.0)
    cluster.apply({"1": np.array([1])})
    cluster.advance(120.0)  # job 1 starts: it loses 20 s of the round
    full = math.floor(rate * 120.0)
    assert cluster.jobs["1"].steps_done == math.floor(full * (120.0 - RESTART_SECONDS) / 120.0)


def read_shockwave_trace_text(*lines: str) -> tuple[ShockwaveJobSpec, ...]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.trace"
        path.write_text("\n".join(lines) + "\n")
        return read_shockwave_trace(path)


def test_ftf_summary_counts_unfair_jobs() -> None:
    rho = ftf_rho(np.array([100.0, 300.0, np.nan]), np.array([100.0, 100.0, 100.0]), 2.0)
    assert rho[:2].tolist() == [0.5, 1.5]
    summary = ftf_summary(rho)
    assert summary["ftf_worst"] == 1.5 and summary["unfair_fraction"] == 0.5


# --- the Shockwave planner ------------------------------------------------------------------------

def _view(name: str, epochs_done: float, submit: float = 0.0, gpus: int = 1,
          allocation: list[int] | None = None) -> JobView:
    return JobView(
        name=name, application="LM (batch size 10)", submit_time=submit, age=0.0,
        attained_service=0.0, allocation=np.array(allocation or [0]), num_restarts=0,
        requested_replicas=gpus, requested_batch_size=10, settings=JobSettings(10, gpus),
        limits=BatchLimits(1, 1, 1, 1), epochs=epochs_done, target_epochs=20,
        examples_per_epoch=59675, batch_size_mode="static")


def test_planner_gives_the_least_progressed_job_more_rounds() -> None:
    # Two identical jobs on one GPU, one at 0 of 20 epochs, one at 10: the log utility is concave
    # and the longest remaining time is penalised, so the plan favours the job at 0.
    policy = make_policy("shockwave", future_rounds=4)
    state = ClusterState(spec=replace(load_cluster_spec("v100:1x1"), round_interval=120.0),
                         now=0.0)
    allocation = policy.decide(state, [_view("behind", 0.0), _view("ahead", 10.0)], shockwave_estimates())
    rounds = {name: sum(name in jobs for jobs in policy._plan.values())
              for name in ("behind", "ahead")}
    assert sum(rounds.values()) == 4  # one job per round on the one GPU
    assert rounds["behind"] > rounds["ahead"]
    assert list(allocation) in (["behind"], ["ahead"])
    assert all(counts.tolist() == [1] for counts in allocation.values())


def test_planner_allocations_are_feasible_and_work_conserving() -> None:
    policy = make_policy("shockwave", future_rounds=3)
    spec = replace(load_cluster_spec("v100:4"), round_interval=120.0)
    state = ClusterState(spec=spec, now=0.0)
    jobs = [_view("a", 1.0, gpus=2, allocation=[0] * spec.num_nodes),
            _view("b", 2.0, allocation=[0] * spec.num_nodes),
            _view("c", 3.0, allocation=[0] * spec.num_nodes),
            _view("d", 0.0, gpus=2, allocation=[0] * spec.num_nodes)]
    allocation = policy.decide(state, jobs, shockwave_estimates())
    used = sum(counts for counts in allocation.values())
    assert np.all(used <= spec.capacity())
    by_name = {job.name: job for job in jobs}
    assert all(int(c.sum()) == by_name[n].requested_replicas for n, c in allocation.items())
    assert int(used.sum()) == 4  # no idle GPU while jobs wait


def test_solver_failure_keeps_the_previous_jobs_and_is_counted() -> None:
    policy = make_policy("shockwave", future_rounds=3)
    spec = replace(load_cluster_spec("v100:1x1"), round_interval=120.0)
    first = policy.decide(ClusterState(spec=spec, now=0.0), [_view("a", 0.0), _view("b", 5.0)],
                          shockwave_estimates())
    assert policy.solver_failures == 0 and len(first) == 1
    policy.time_limit = -1.0  # HiGHS rejects the option: the solve fails
    second = policy.decide(ClusterState(spec=spec, now=120.0),
                           [_view("a", 0.0), _view("b", 5.0), _view("c", 0.0, submit=100.0)],
                           shockwave_estimates())
    assert policy.solver_failures == 1
    assert list(second) == list(first)


def test_a_failed_first_plan_still_fills_the_gpus_in_decreasing_remaining_time() -> None:
    # No plan and no previous round: the work-conserving fill alone runs jobs (before, nothing
    # ran, and a run whose every solve failed waited until its horizon).
    policy = make_policy("shockwave", future_rounds=3)
    policy.time_limit = -1.0  # HiGHS rejects the option: every solve fails
    spec = replace(load_cluster_spec("v100:4"), round_interval=120.0)
    none = [0] * spec.num_nodes
    jobs = [_view("a", 9.0, gpus=2, allocation=none), _view("b", 2.0, allocation=none),
            _view("c", 3.0, allocation=none), _view("d", 0.0, gpus=2, allocation=none)]
    allocation = policy.decide(ClusterState(spec=spec, now=0.0), jobs, shockwave_estimates())
    assert policy.solver_failures == 1
    # d has the most left (0 of 20 epochs), then b, then c; a (9 done) waits.
    assert sorted(allocation) == ["b", "c", "d"]
    assert int(sum(allocation.values()).sum()) == 4


def test_cli_runs_shockwave_on_a_shockwave_trace(tmp_path: Path) -> None:
    path = tmp_path / "three.trace"
    lines = [GOOD.replace("\t77584\t", "\t12000\t"),
             GOOD.replace("\t77584\t", "\t6000\t")[:-1] + "60",
             GOOD.replace("\tgns\t", "\tstatic\t").replace("\t77584\t", "\t9000\t")[:-1] + "130"]
    path.write_text("\n".join(lines) + "\n")
    done = run_cli("simulate", "--trace", str(path), "--cluster", "v100:2x1", "--policy",
                   "shockwave", "--policy-opt", "future_rounds=4", "--no-progress", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["finished"] == 3 and row["round_s"] == 120.0
    assert row["ftf_worst"] >= row["ftf_p50"] > 0 and 0.0 <= row["unfair_fraction"] <= 1.0
    gavel = tmp_path / "gavel.trace"
    gavel.write_text("ResNet-50 (batch size 32)\tpython3 main.py\timagenet\t--num_minibatches\t1"
                     "\t500\t1\t1\t-1\t0\n")
    refused = run_cli("simulate", "--trace", str(gavel), "--cluster", "v100:2x1", "--policy",
                      "shockwave", "--no-progress")
    assert refused.returncode == 2 and "12-column Shockwave trace" in refused.stderr
    assert refused.stderr.count("\n") == 1


def test_calibration_rescales_epoch_times_when_measurements_disagree_by_over_40_percent() -> None:
    policy = make_policy("shockwave")
    profile = profile_from([10] * 20, {10: 100.0})  # 100 s per epoch of 1000 examples
    view = replace(_view("j", 0.0), examples_per_epoch=1000)
    # Measured at round 5 (120 s rounds): 2 steps/s at batch 10 stands for rounds 0-5, 12,000
    # examples; the profile does 6 epochs, 6,000 examples, in those 600 s: factor 6000 / 12000.
    policy._measured["j"] = {5: (2.0, 10)}
    assert policy.calibration(view, profile) == pytest.approx(0.5)
    # Within 40 % the factor in force stays.
    policy._measured["j"] = {5: (1.2, 10)}
    assert policy.calibration(view, profile) == pytest.approx(0.5)
    fresh = make_policy("shockwave")
    fresh._measured["j"] = {5: (1.2, 10)}
    assert fresh.calibration(view, profile) == 1.0
