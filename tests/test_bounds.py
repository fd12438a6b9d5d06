"""Bounds wherever memory or time follows a number (issue 40, item 5): the cluster's size, the
options of policies and searches, and traces read only as far as they are needed."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from bayes_sched.cluster_spec import (
    MAX_CLUSTER_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    ClusterSpec,
    parse_cluster_spec,
    read_cluster_spec,
)
from bayes_sched.errors import InputError
from bayes_sched.estimation.registry import ESTIMATORS
from bayes_sched.mechanisms.genetic_allocation.search import MAX_POPULATION, GAConfig
from bayes_sched.policies import POLICIES, TiresiasPolicy
from bayes_sched.registry import type_name
from bayes_sched.sim.gavel_jobs import read_gavel_trace
from bayes_sched.sim.workload import WORKLOAD_COLUMNS, read_workload

GAVEL_LINE = "ResNet-18 (batch size 64)\tcmd\tdir\t-n\t1\t1000\t1\t1\t-1\t{arrival}\n"
BAD_GAVEL_LINE = "ResNet-18 (batch size 64)\tcmd\tdir\t-n\t1\tnan\t1\t1\t-1\t0\n"


# --- the cluster's size ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("1000000000x1:t4", f"1000000000 nodes; expected at most {MAX_NODES} nodes"),
    ("v100:1000000000", f"250000000 nodes; expected at most {MAX_NODES} nodes"),
    ("t4:2000x1024", f"2048000 GPUs; expected at most {MAX_CLUSTER_GPUS} GPUs"),
    ("1x2000:t4", f"2000 GPUs per node; expected at most {MAX_GPUS_PER_NODE}"),
    ("16x4:t4,65530x1:v100", f"65546 nodes; expected at most {MAX_NODES} nodes"),
    ("v100:" + "9" * 40, "more than 12 digits"),
])
def test_a_cluster_beyond_the_bounds_is_refused_before_any_node_is_built(
        text: str, expected: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as info:
            parse_cluster_spec(text, "--cluster")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    entry = text.split(",")[-1]  # the entry that goes past the bound
    assert f"--cluster entry '{entry}'" in str(info.value) and expected in str(info.value)
    assert peak < 1_000_000  # no node list was built: bytes, not the gigabytes 1e9 nodes take


def test_the_largest_cluster_allowed_is_built() -> None:
    spec = parse_cluster_spec(f"{MAX_NODES}x{MAX_CLUSTER_GPUS // MAX_NODES}:t4")
    assert spec.num_nodes == MAX_NODES and spec.total_gpus == MAX_CLUSTER_GPUS
    with pytest.raises(InputError, match="nodes in a cluster"):
        ClusterSpec.homogeneous(MAX_NODES + 1, 1)


@pytest.mark.parametrize(("body", "field", "expected"), [
    ('[[nodes]]\ngpu_type = "t4"\ncount = 1000000000\ngpus = 4\n', "nodes[0].count",
     f"expected a whole number in [1, {MAX_NODES}]"),
    ('[[nodes]]\ngpu_type = "t4"\ncount = 10\ngpus = 1000000000\n', "nodes[0].gpus",
     f"expected a whole number in [1, {MAX_GPUS_PER_NODE}]"),
    ('[[nodes]]\ngpu_type = "t4"\ncount = 40000\ngpus = 8\n'
     '[[nodes]]\ngpu_type = "v100"\ncount = 40000\ngpus = 8\n', "nodes[1].count",
     f"80000 nodes; expected at most {MAX_NODES} nodes in a cluster"),
    ('nodes = "1000000000x1:t4"\n', "nodes", "1000000000 nodes"),
])
def test_a_cluster_file_beyond_the_bounds_names_the_field(tmp_path: Path, body: str,
                                                          field: str, expected: str) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(body)
    with pytest.raises(InputError) as info:
        read_cluster_spec(path)
    message = str(info.value)
    assert str(path) in message and f"column '{field}'" in message and expected in message


# --- options: bounds declared in the type hints, enforced by the registry -----------------------

@pytest.mark.parametrize(("policy", "item", "expected"), [
    ("pollux", "ga.population=-3", f"option ga.population is -3: expected int in [2, "
                                   f"{MAX_POPULATION}]"),
    ("pollux", "ga.population=1000000000", "option ga.population is 1000000000"),
    ("pollux", "ga.generations=0", "option ga.generations is 0"),
    ("pollux", "ga.crossover_prob=1.5", "expected float in [0, 1]"),
    ("pollux", "p=nan", "option p is nan: expected a finite number"),
    ("pollux", "p=-inf", "option p is -inf: expected a finite number"),
    ("pollux", "risk=nan", "option risk is nan: expected a finite number or None"),
    ("pollux", "job_overrides.ncf.max_replicas=0", "option job_overrides.ncf.max_replicas"),
    ("pollux", "max_replicas_cap=0", "option max_replicas_cap is 0"),
    ("tiresias", "thresholds=[-1]", "option thresholds[0] is -1: expected float > 0"),
    ("tiresias", "thresholds=[7200, 3600]", "strictly increasing"),
    ("optimus", "max_replicas.ncf=-1", "option max_replicas.ncf is -1"),
    ("shockwave", "future_rounds=1000000000", "option future_rounds is 1000000000"),
    ("shockwave", "lam=-1", "option lam is -1: expected float > 0"),
    ("shockwave", "k=-1", "option k is -1: expected float >= 0"),
    ("shockwave", "mip_rel_gap=1", "option mip_rel_gap is 1: expected float in [0, 1)"),
    ("sia", "lambda_n=inf", "option lambda_n is inf: expected a finite number"),
])
def test_options_out_of_bounds_are_one_line_naming_the_option(policy: str, item: str,
                                                              expected: str) -> None:
    with pytest.raises(InputError) as info:
        POLICIES.make(policy, **POLICIES.parse(policy, [item], "--policy-opt"))
    message = str(info.value)
    assert "\n" not in message and expected in message, message


@pytest.mark.parametrize(("estimator", "item", "expected"), [
    ("job_posterior", "num_samples=1000000000", "option num_samples is 1000000000"),
    ("bo_colocation", "posterior_draws=1000000000", "option posterior_draws is 1000000000"),
    ("bo_colocation", "forget=2", "option forget is 2: expected float in (0, 1]"),
    ("bo_colocation", "pair_prior.own=-1", "option pair_prior.own is -1: expected float > 0"),
    ("noise_scale", "num_draws=0", "option num_draws is 0"),
])
def test_estimator_options_out_of_bounds_are_one_line_naming_the_option(
        estimator: str, item: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        ESTIMATORS.make(estimator, **ESTIMATORS.parse(estimator, [item], "--estimator-opt"))
    message = str(info.value)
    assert "\n" not in message and expected in message, message


def test_options_within_bounds_are_kept_and_the_listing_shows_the_bounds() -> None:
    options = POLICIES.parse("tiresias", ["thresholds=[3600, 7200]"])
    policy = POLICIES.make("tiresias", **options)
    assert isinstance(policy, TiresiasPolicy) and policy.thresholds == (3600.0, 7200.0)
    ga = POLICIES.parse("pollux", ["ga.population=2", "ga.generations=3"])["ga"]
    assert (ga.population, ga.generations) == (2, 3)
    assert type_name(POLICIES.options("pollux")["max_replicas_cap"].annotation) \
        == "int in [1, 1048576]"


def test_a_search_config_built_directly_is_checked_too() -> None:
    with pytest.raises(ValueError, match="GAConfig.population is -3"):
        GAConfig(population=-3)
    with pytest.raises(ValueError, match=r"GAConfig.zero_prob is nan: .*finite"):
        GAConfig(zero_prob=float("nan"))


# --- traces streamed ---------------------------------------------------------------------------

def _write_gavel_trace(path: Path, good_lines: int, tail_lines: int) -> None:
    """``good_lines`` valid jobs, then a malformed line, then ``tail_lines`` more valid ones."""
    with path.open("w") as handle:
        handle.writelines(GAVEL_LINE.format(arrival=i) for i in range(good_lines))
        handle.write(BAD_GAVEL_LINE)
        handle.writelines(GAVEL_LINE.format(arrival=good_lines + i) for i in range(tail_lines))


def test_a_trace_cut_to_n_jobs_never_reads_past_its_nth_line(tmp_path: Path) -> None:
    path = tmp_path / "long.trace"
    _write_gavel_trace(path, 50, 200_000)
    jobs = read_gavel_trace(path, max_jobs=50)
    assert [job.name for job in jobs] == [str(i) for i in range(50)]
    assert jobs[-1].submit_time == 49.0
    with pytest.raises(InputError) as info:  # read whole, the bad line is found and named
        read_gavel_trace(path)
    assert "row 51, column 'total_steps'" in str(info.value) and str(path) in str(info.value)


def test_a_trace_cut_to_n_jobs_returns_before_the_file_ends(tmp_path: Path) -> None:
    """A FIFO whose writer stops after ten lines and holds it open: a reader that wanted the
    whole file would wait for ever; one that stops at the tenth job returns."""
    fifo = tmp_path / "jobs.trace"
    os.mkfifo(fifo)
    release = threading.Event()

    def write() -> None:
        with fifo.open("w") as handle:
            handle.writelines(GAVEL_LINE.format(arrival=i) for i in range(10))
            handle.flush()
            release.wait(60)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(read_gavel_trace(fifo, max_jobs=10)),
                              daemon=True)
    reader.start()
    reader.join(30)
    release.set()
    writer.join(5)
    assert not reader.is_alive(), "the reader waited for the end of the file"
    assert len(result[0]) == 10  # type: ignore[arg-type]


def test_a_workload_cut_to_n_jobs_never_reads_past_its_nth_row(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    rows = [f"j{i},{i},cifar10,1,128" for i in range(20)]
    path.write_text("\n".join([",".join(WORKLOAD_COLUMNS), *rows, "bad,0,cifar10,-1,128",
                               *rows]) + "\n")
    assert len(read_workload(path, max_jobs=20)) == 20
    with pytest.raises(InputError, match="row 22, column 'num_replicas'"):
        read_workload(path)
