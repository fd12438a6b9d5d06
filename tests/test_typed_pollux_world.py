"""The Pollux world on typed GPUs: derived profiles, typed simulation, Sia there, per-type plots and
the command line across both worlds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.jobs import JobSettings, JobSpec
from bayes_sched.policies.sia_adaptive import gpu_counts
from bayes_sched.sim import SimConfig, Workload, run_simulation
from bayes_sched.sim.physics import APPLICATION_NAMES, get_application
from bayes_sched.sim.simulator import SimulatedCluster
from bayes_sched.sim.type_utilization import (
    read_series_csv,
    utilization_series,
    write_type_utilization,
)
from bayes_sched.sim.typed_profiles import (
    CLOSEST_GAVEL_MODEL,
    T4_PEAK_FP32_TFLOPS,
    V100_PEAK_FP32_TFLOPS,
    check_cluster_types,
    compute_factor,
    derivation_table,
    typed_step_time,
)
from bayes_sched.throughputs import load_gavel_throughputs
from tests.cli_inprocess import run_cli

ANCHOR = T4_PEAK_FP32_TFLOPS / V100_PEAK_FP32_TFLOPS
PNG = b"\x89PNG\r\n\x1a\n"


def _gavel_ratio(job_type: str, gpu: str) -> float:
    table = load_gavel_throughputs("simulation")
    anchor, other = (table.steps_per_second(job_type, 1, t) for t in ("v100", gpu))
    assert anchor is not None and other is not None
    return anchor / other


# --- the derivation rule --------------------------------------------------------------------------

def test_compute_factor_follows_the_documented_rule() -> None:
    # The measured type is the T4 itself; V100 is the anchor at every micro-batch.
    assert compute_factor("cifar10", "t4", 64) == 1.0
    for m in (4, 64, 5000):
        assert compute_factor("cifar10", "v100", m) == pytest.approx(ANCHOR)
    # At a batch Gavel measured: the anchor times Gavel's V100/K80 ratio of the closest model.
    at_128 = ANCHOR * _gavel_ratio("ResNet-18 (batch size 128)", "k80")
    assert compute_factor("cifar10", "k80", 128) == pytest.approx(at_128)
    # Between two measured batches: linear in log b (the geometric mean halfway); flat outside.
    at_64 = ANCHOR * _gavel_ratio("ResNet-18 (batch size 64)", "k80")
    assert compute_factor("cifar10", "k80", np.sqrt(64 * 128)) == pytest.approx(
        np.sqrt(at_64 * at_128))
    at_256 = ANCHOR * _gavel_ratio("ResNet-18 (batch size 256)", "k80")
    assert compute_factor("cifar10", "k80", 4096) == pytest.approx(at_256)
    assert compute_factor("imagenet", "p100", 64) == pytest.approx(
        ANCHOR * _gavel_ratio("ResNet-50 (batch size 64)", "p100"))


def test_typed_step_time_scales_compute_keeps_sync_and_waits_for_the_slowest() -> None:
    app = get_application("imagenet")
    step, sync = app.step_time((4, 4), 64)
    v_step, v_sync = typed_step_time("imagenet", ("v100",), (4, 4), 64)
    k_step, k_sync = typed_step_time("imagenet", ("k80",), (4, 4), 64)
    assert v_sync == sync == k_sync
    assert v_step - sync == pytest.approx((step - sync) * compute_factor("imagenet", "v100", 64))
    assert v_step < step < k_step
    assert typed_step_time("imagenet", ("k80", "v100"), (4, 4), 64) == (k_step, k_sync)


def test_derivation_table_says_which_profiles_are_derived() -> None:
    rows = derivation_table(("t4", "v100", "k80"))
    assert len(rows) == 3 * len(APPLICATION_NAMES)
    for row in rows:
        measured = row["gpu_type"] == "t4"
        assert row["profile"] == ("measured" if measured else "derived")
        if not measured:
            assert row["gavel_model"] == CLOSEST_GAVEL_MODEL[str(row["application"])].family
            assert float(row["factor_init_bsz"]) > 0  # type: ignore[arg-type]


def test_types_without_a_profile_are_refused() -> None:
    with pytest.raises(InputError, match="no profile on GPU type 'a100'"):
        SimConfig(cluster=parse_cluster_spec("v100:4,a100:4"))
    # An application of the user's own (no closest Gavel model) runs on the T4 only.
    with pytest.raises(InputError, match="'mine' has no closest Gavel model"):
        check_cluster_types(("v100",), ("mine",))
    check_cluster_types(("t4", "v100"), ("cifar10",))


# --- the typed simulator --------------------------------------------------------------------------

def _progress_on(spec: str, counts: list[int], seconds: float = 600.0) -> tuple[float, set[str]]:
    """A fixed-batch bert job on GPUs ``counts`` (per node) of cluster ``spec`` for ``seconds``:
    its progress and the GPU types its measurements carry."""
    job = JobSpec("bert-0", 0.0, "bert", 1, 12)
    cluster = SimulatedCluster(Workload("one", (job,)), SimConfig(cluster=parse_cluster_spec(spec)),
                               lambda spec_: JobSettings(spec_.batch_size))
    cluster.apply({"bert-0": np.array(counts)})
    cluster.advance(seconds)
    sim = cluster.jobs["bert-0"]
    return sim.progress, {obs.gpu_type for obs in sim.agent.observations.values()}


def test_typed_nodes_run_at_their_derived_speed() -> None:
    t4, t4_types = _progress_on("t4:4", [1])
    v100, v100_types = _progress_on("v100:4", [1])
    k80, k80_types = _progress_on("k80:4", [1])
    assert k80 < t4 < v100
    assert (t4_types, v100_types, k80_types) == ({"t4"}, {"v100"}, {"k80"})
    # Across types the K80 paces the job: as fast as on two K80 nodes, slower than two V100s.
    mixed, mixed_types = _progress_on("v100:4,k80:4", [1, 1])
    both_k80, _ = _progress_on("k80:8", [1, 1])
    both_v100, _ = _progress_on("v100:8", [1, 1])
    assert mixed == pytest.approx(both_k80) and mixed < both_v100
    assert mixed_types == {"k80"}


@pytest.fixture(scope="module")
def sia_run():  # noqa: ANN201
    """Three bert jobs under sia_adaptive on V100 and K80 nodes, and every round's allocations."""
    jobs = tuple(JobSpec(f"bert-{i}", 60.0 * i, "bert", 1, 12) for i in range(3))
    config = SimConfig(cluster=parse_cluster_spec("v100:4,k80:4"), max_time=1500.0)
    rounds: list[dict[str, np.ndarray]] = []
    result = run_simulation(Workload("bert3", jobs), "sia_adaptive", config,
                            on_round=lambda cluster: rounds.append(cluster.allocations()))
    return result, rounds


def test_sia_adaptive_places_every_job_on_one_gpu_type(sia_run) -> None:  # noqa: ANN001
    result, rounds = sia_run
    node_types = np.array(result.config.cluster.gpu_types)
    assert result.summary["utilization_v100"] > 0
    placed = [counts for allocations in rounds for counts in allocations.values()
              if counts.sum()]
    assert placed
    for counts in placed:  # Sia's configurations: one GPU type, a count it offers
        assert len(set(node_types[counts > 0])) == 1
        assert int(counts.sum()) in gpu_counts(8, 4)
    assert list(gpu_counts(12, 4)) == [1, 2, 4, 8, 12]


def test_type_utilisation_plot_is_written_and_its_data_is_the_summarys(sia_run,  # noqa: ANN001
                                                                       tmp_path: Path) -> None:
    sia_run, _ = sia_run
    png, csv = write_type_utilization(utilization_series(sia_run), tmp_path / "plots", "sia")
    assert png.read_bytes()[:8] == PNG
    series = read_series_csv(csv)
    assert series.gpu_types == ("v100", "k80")
    for key, value in series.means().items():
        assert value == pytest.approx(sia_run.summary[key], abs=1e-12)
    assert series.fraction.shape == (sia_run.timeline.sizes["time"], 2)
    # The plotted numbers are the GPUs held per type, over the type's GPUs.
    held = sia_run.timeline["gpus"].values.sum(axis=1) / 4.0
    assert np.allclose(series.fraction.sum(axis=1), held)


# --- the command line -----------------------------------------------------------------------------

def _ncf_workload(path: Path, jobs: int = 2, application: str = "ncf") -> Path:
    """Short jobs (NCF: ~25 min alone on one T4)."""
    lines = ["name,time,application,num_replicas,batch_size"]
    lines += [f"{application}-{i},{60 * i},{application},1,256" for i in range(jobs)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_simulate_trace_runs_a_pollux_workload_on_a_typed_cluster_with_plots(
        tmp_path: Path) -> None:
    workload = _ncf_workload(tmp_path / "w.csv")
    done = run_cli("simulate", "--trace", str(workload), "--cluster", "v100:4,p100:4",
                   "--policy", "fifo", "--seed", "0", "--plot", str(tmp_path / "p"), "--json",
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)[0]
    assert row["finished"] == 2 and 0 <= row["unfair_fraction"] <= 1
    for key in ("ftf_worst", "ftf_p50", "ftf_p90", "ftf_p99"):
        assert np.isfinite(row[key])
    series = read_series_csv(tmp_path / "p" / "fifo_w_seed0.csv")
    assert (tmp_path / "p" / "fifo_w_seed0.png").read_bytes()[:8] == PNG
    assert series.means()["utilization_v100"] > 0  # the summary's own figure is in the report


def test_simulate_trace_table_world_plot_matches_the_summary(tmp_path: Path) -> None:
    done = run_cli("simulate", "--trace", "small_test", "--cluster", "v100:4,p100:4,k80:4",
                   "--policy", "max_min_fairness_perf", "--max-jobs", "3", "--plot",
                   str(tmp_path / "p"), "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)[0]
    assert {"ftf_worst", "ftf_p50", "ftf_p99", "unfair_fraction"} <= set(row)
    series = read_series_csv(next((tmp_path / "p").glob("*.csv")))
    assert (next((tmp_path / "p").glob("*.png"))).read_bytes()[:8] == PNG
    for key, value in series.means().items():
        assert value == pytest.approx(row[key], abs=1e-12)


@pytest.mark.parametrize(("argv", "names"), [
    (["simulate", "--trace", "workload-1", "--cluster", "a100:8", "--policy", "fifo"],
     "--cluster"),
    (["simulate", "--trace", "workload-1", "--policy", "max_min_fairness_perf"], "--policy"),
    (["simulate", "--trace", "workload-1", "--policy", "sia"], "sia_adaptive"),
    (["simulate", "--trace", "small_test", "--cluster", "v100:4", "--policy", "pollux"],
     "--policy"),
    (["compare", "--policies", "pollux", "--workloads", "none", "--traces", "small_test"],
     "--policies pollux"),
    (["compare", "--policies", "max_min_fairness_perf", "--workloads", "workload-1"],
     "--policies max_min_fairness_perf"),
])
def test_bad_input_is_one_line_naming_the_flag(argv: list[str], names: str,
                                               tmp_path: Path) -> None:
    done = run_cli(*argv, "--no-progress", *(["--out", str(tmp_path / "o")]
                                            if argv[0] == "compare" else []))
    assert done.returncode == 2
    assert names in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_unknown_job_type_in_a_pollux_trace_names_file_row_and_column(tmp_path: Path) -> None:
    workload = _ncf_workload(tmp_path / "w.csv", application="gpt5")
    done = run_cli("simulate", "--trace", str(workload), "--cluster", "v100:4", "--policy",
                   "fifo", "--no-progress")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(workload) in done.stderr and "row 2" in done.stderr
    assert "'application'" in done.stderr and "gpt5" in done.stderr


def test_compare_runs_both_worlds_into_one_table(tmp_path: Path) -> None:
    workload = _ncf_workload(tmp_path / "w.csv")
    done = run_cli("compare", "--policies", "fifo", "max_min_fairness_perf", "--workloads",
                   str(workload), "--traces", "small_test", "--max-jobs", "2", "--cluster",
                   "v100:4,p100:4,k80:4", "--processes", "1", "--out", str(tmp_path / "o"),
                   "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {(r["world"], r["policy"]) for r in rows} == {
        ("pollux", "fifo"), ("table", "max_min_fairness_perf")}
    for row in rows:
        assert row["finished"] == 2 and np.isfinite(row["ftf_worst"])
    assert (tmp_path / "o" / "worlds.csv").is_file()
    report = (tmp_path / "o" / "report.md").read_text()
    assert "Profiles per GPU type" in report and "derived" in report
    assert list((tmp_path / "o" / "type_utilization").glob("*.png"))
