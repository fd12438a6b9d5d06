"""The contention network: topology, synthetic generator, model, inference, report and CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bayes_sched.contention.inference import (
    fit_svi,
    most_likely_contended,
    open_counters,
    prepare,
    run_nuts,
    summarise,
)
from bayes_sched.contention.report import write_report
from bayes_sched.sim.laws.contention_generator import GeneratorConfig, generate, max_min_share
from bayes_sched.topology import NodeTopology, TopologyError, read_topology
from counters import schema
from counters.errors import CountersError
from counters.store import write_store

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster():
    torch.set_num_threads(1)
    return generate(GeneratorConfig(num_nodes=10, seed=11))


@pytest.fixture(scope="module")
def posterior(cluster):
    window = prepare(cluster.counters, cluster.topology)
    return summarise(window, fit_svi(window, num_steps=100, seed=0))


def test_max_min_share_fills_capacity_fairly() -> None:
    grants = max_min_share(np.array([[1.0, 5.0, 10.0]]), 9.0)
    np.testing.assert_allclose(grants, [[1.0, 4.0, 4.0]])
    np.testing.assert_allclose(max_min_share(np.array([[1.0, 2.0]]), 9.0), [[1.0, 2.0]])


def test_topology_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "topo.json"
    path.write_text(
        json.dumps({"gpus_per_switch": [4, 4], "switch_numa": [0, 1], "pcie_switch_capacity": 32e9})
    )
    topology = read_topology(path)
    assert topology.num_gpus == 8 and topology.switch_of_gpu().tolist() == [0] * 4 + [1] * 4
    path.write_text(json.dumps({"gpus_per_switch": [4, 4], "switch_numa": [0]}))
    with pytest.raises(TopologyError, match="switch_numa: 1 entries, expected one per switch"):
        read_topology(path)
    path.write_text(json.dumps({"gpus": 8}))
    with pytest.raises(TopologyError, match="unknown field 'gpus'"):
        read_topology(path)
    path.write_text(json.dumps({"nic_capacity": -1}))
    with pytest.raises(TopologyError, match="nic_capacity"):
        read_topology(path)


def test_generator_emits_valid_counters_with_gaps_and_multiplexing(cluster) -> None:
    ds = cluster.counters
    schema.validate(ds)
    assert dict(ds.sizes) == {"time": 60, "node": 10, "device": 8}
    assert ds["perf_dram_read"].attrs["units"] == "byte"
    missing = 1 - float(ds["gpu_utilization_valid"].mean())
    assert 0.005 < missing < 0.1  # missing samples are NaN, masked
    fraction = ds["perf_dram_read_running_fraction"].values
    assert np.nanmax(fraction) <= 0.5 and np.nanmin(fraction) >= 0.2
    # Ground truth: the scenario's resource is contended, nothing else is.
    for n, node in enumerate(ds["node"].values):
        kinds = {
            str(k)
            for k, flag in zip(
                cluster.truth["resource"].values, cluster.truth["contended"].values[n], strict=True
            )
            if flag
        }
        expected = cluster.scenario[str(node)]
        if expected == "none":
            assert not kinds
        else:
            assert all(k.startswith(expected.split("_")[0]) for k in kinds) and kinds
    # Contention slows jobs down: the worst step times are on contended nodes.
    slow = cluster.jobs.assign(
        slowdown=(cluster.step_time.mean("time").values / cluster.jobs["base_step_s"].to_numpy())
    )
    worst = slow.sort_values("slowdown").iloc[-1]
    assert cluster.scenario[worst["node"]] != "none" and worst["slowdown"] > 1.1


def test_generator_is_deterministic_in_its_seed() -> None:
    first = generate(GeneratorConfig(num_nodes=2, seed=5)).counters
    second = generate(GeneratorConfig(num_nodes=2, seed=5)).counters
    third = generate(GeneratorConfig(num_nodes=2, seed=6)).counters
    assert first.identical(second)
    assert not first.identical(third)


def test_contended_resources_identified(cluster, posterior) -> None:
    predicted = most_likely_contended(posterior)
    names = list(cluster.truth["resource"].values)
    correct = 0
    for n, node in enumerate(cluster.truth["node"].values):
        flags = cluster.truth["contended"].values[n]
        truth = names[int(np.argmax(flags))] if flags.any() else "none"
        correct += predicted[str(node)] == truth
    assert correct >= 9  # of 10 nodes


def test_denoised_dram_beats_raw_multiplexed_counters(cluster, posterior) -> None:
    truth = (cluster.truth["perf_dram_read_rate"] + cluster.truth["perf_dram_write_rate"]).values
    raw = posterior["raw_dram_rate"].values
    denoised = posterior["dram_rate"].sel(quantile=0.5).values
    raw_error = np.nanmean(np.abs(raw - truth) / truth)
    denoised_error = np.mean(np.abs(denoised - truth) / truth)
    assert raw_error > 0.1
    assert denoised_error < raw_error / 4


def test_denoised_intervals_cover_the_truth_near_their_nominal_level(cluster, posterior) -> None:
    truth = cluster.truth
    expected = {
        "dram_rate": truth["perf_dram_read_rate"] + truth["perf_dram_write_rate"],
        "pcie_rate": truth["gpu_gpm_pcie_tx_rate"] + truth["gpu_gpm_pcie_rx_rate"],
        "nic_rate": truth["network_rx_rate"] + truth["network_tx_rate"],
        "gpu_utilization": truth["gpu_utilization"],
    }
    for name, values in expected.items():
        low = posterior[name].sel(quantile=0.05).values
        high = posterior[name].sel(quantile=0.95).values
        covered = float(np.mean((values.values >= low) & (values.values <= high)))
        assert 0.75 <= covered <= 0.995, (name, covered)


def test_all_nan_node_gets_wide_intervals_not_a_confident_answer(cluster) -> None:
    ds = cluster.counters.copy(deep=True)
    for name in schema.value_names(ds):
        ds[name].loc[{"node": "node000"}] = np.nan
        ds[schema.mask_name(name)] = np.isfinite(ds[name])
    window = prepare(ds, cluster.topology)
    posterior = summarise(window, fit_svi(window, num_steps=100, seed=0))
    width = (
        posterior["utilization"].sel(quantile=0.95) - posterior["utilization"].sel(quantile=0.05)
    ).mean("time")
    blind, seen = width.sel(node="node000"), width.sel(node="node001")
    assert float(blind.sel(resource="dram")) > 5 * float(seen.sel(resource="dram"))
    assert float(blind.sel(resource="pcie_switch0")) > 5 * float(seen.sel(resource="pcie_switch0"))
    assert float(posterior["p_contended"].sel(node="node000").max()) < 0.9


def test_wrong_units_and_mismatched_topology_are_errors(cluster) -> None:
    ds = cluster.counters.copy(deep=True)
    ds["gpu_gpm_pcie_tx_rate"].attrs["units"] = "MB s-1"
    with pytest.raises(CountersError, match="gpu_gpm_pcie_tx_rate.*units"):
        prepare(ds, cluster.topology)
    with pytest.raises(TopologyError, match="8 GPUs per node, but the topology has 4"):
        prepare(cluster.counters, NodeTopology(gpus_per_switch=(2, 2), switch_numa=(0, 1)))
    with pytest.raises(CountersError, match="perf_dram_read_rate' is missing"):
        prepare(
            cluster.counters.drop_vars(["perf_dram_read", "perf_dram_read_valid"]), cluster.topology
        )


@pytest.mark.slow  # NUTS takes minutes even on one node with two GPUs
def test_nuts_agrees_with_svi_on_a_small_window() -> None:
    topology = NodeTopology(gpus_per_switch=(1, 1), switch_numa=(0, 0))
    small = generate(
        GeneratorConfig(num_nodes=1, num_samples=8, topology=topology, seed=4, scenarios=("none",))
    )
    window = prepare(small.counters, topology)
    svi = fit_svi(window, num_steps=300, seed=0)
    nuts = run_nuts(window, num_samples=50, warmup_steps=50, seed=0)
    for name in ("dram", "pcie"):
        svi_median = svi[name].median(0).values
        nuts_median = nuts[name].median(0).values
        spread = nuts[name].std(0)
        assert torch.all(torch.abs(svi_median - nuts_median) < 3 * spread + 0.05)


def test_report_written_with_plots(posterior, tmp_path: Path) -> None:
    report = write_report(posterior, tmp_path / "out", source="synthetic")
    text = report.read_text()
    assert "| node | resource | P(contended)" in text
    images = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert images and all(f"]({name})" in text for name in images)
    assert not list((tmp_path / "out").glob(".*tmp*"))
    assert (tmp_path / "out" / images[0]).read_bytes()[:4] == b"\x89PNG"


def test_cli_synthetic_then_infer_contention(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    store = tmp_path / "cluster"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_sched",
            "infer",
            "synthetic",
            str(store),
            "--nodes",
            "3",
            "--seed",
            "2",
        ],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
    )
    truth = json.loads((store / "truth.json").read_text())
    assert set(truth["scenario"]) == {"node000", "node001", "node002"}
    assert open_counters(store).sizes["node"] == 3
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_sched",
            "infer",
            "contention",
            str(store),
            "--out",
            str(tmp_path / "report"),
            "--steps",
            "60",
            "--json",
            "--jobs",
            str(store / "jobs.csv"),
            "--step-times",
            str(store / "step_times.csv"),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {"node", "resource", "p_contended"} <= set(rows[0])
    report = (tmp_path / "report" / "contention.md").read_text()
    assert "## Jobs: sensitivity to each resource" in report
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_sched",
            "infer",
            "contention",
            str(tmp_path / "nothing"),
            "--out",
            str(tmp_path / "r2"),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("bayes-sched: error:") and "Traceback" not in bad.stderr


def test_single_node_store_is_read(tmp_path: Path) -> None:
    one = generate(GeneratorConfig(num_nodes=1, seed=3))
    write_store(one.counters, tmp_path / "node")
    ds = open_counters(tmp_path / "node")
    assert ds.sizes["node"] == 1 and "perf_dram_read" in ds


def test_job_sensitivity_found_where_contention_is(cluster) -> None:
    from bayes_sched.contention.jobs import infer_jobs

    window = prepare(cluster.counters, cluster.topology)
    draws = fit_svi(window, num_steps=100, seed=0)
    jobs = cluster.jobs.rename(columns={"base_step_s": "solo_step_s"})
    out = infer_jobs(window, draws, jobs, cluster.step_time, num_steps=200).set_index("job")
    slowdown = cluster.step_time.mean("time").to_series() / jobs.set_index("job")["solo_step_s"]
    on_dram = [
        j
        for j, node in zip(jobs["job"], jobs["node"], strict=True)
        if cluster.scenario[node] == "dram"
    ]
    quiet = [
        j
        for j, node in zip(jobs["job"], jobs["node"], strict=True)
        if cluster.scenario[node] == "none"
    ]
    assert on_dram and quiet
    # Saturated DRAM: sensitivity near the true log slowdown (the laws differ: the truth is
    # max-min sharing, the model a pressure ramp, hence the loose factor), with a tight interval.
    ratio = out.loc[on_dram, "sensitivity_dram"] / np.log(slowdown[on_dram])
    assert ratio.between(0.8, 1.4).all()
    tight = out.loc[on_dram, "sensitivity_dram_upper_90"] - out.loc[on_dram, "sensitivity_dram_lower_90"]
    loose = out.loc[quiet, "sensitivity_dram_upper_90"] - out.loc[quiet, "sensitivity_dram_lower_90"]
    assert tight.max() < 0.2 < loose.min()  # nothing saturated: the data cannot say
    assert (out["pcie_demand"] > 0).all() and out["sm_demand"].between(0, 1).all()


def test_multi_node_jobs_cross_every_spanned_nic() -> None:
    """Generator and model share the invariant: a job spanning nodes puts the same all-reduce
    bytes on each of their NICs."""
    cluster = generate(GeneratorConfig(num_nodes=4, multi_node_jobs=2, num_samples=30, seed=5))
    assert len(cluster.multi_node) == 2
    nic = (cluster.truth["network_rx_rate"] + cluster.truth["network_tx_rate"]).values
    allreduce = cluster.truth["allreduce_rate"].values
    nodes = list(cluster.truth["node"].values)
    spans = {row.job: list(row.nodes) for row in cluster.multi_node.itertuples()}
    for m, job in enumerate(cluster.truth["span_job"].values):
        assert (allreduce[:, m] > 0).all()
        for node in spans[job]:
            assert (nic[:, nodes.index(node)] >= allreduce[:, m] * (1 - 1e-9)).all()
    window = prepare(cluster.counters, cluster.topology, multi_node=spans)
    assert window.data.spans.shape == (2, 4)
    draws = fit_svi(window, num_steps=30, num_samples=50, seed=0)
    assert draws["allreduce"].shape == (50, 30, 2)
    for m, job in enumerate(spans):
        for node in spans[job]:
            assert (draws["nic"][..., nodes.index(node)] >= draws["allreduce"][..., m]).all()
    with pytest.raises(TopologyError, match="spans node 'node999'"):
        prepare(cluster.counters, cluster.topology, multi_node={"j": ["node000", "node999"]})
    with pytest.raises(TopologyError, match="expected 2 or more"):
        prepare(cluster.counters, cluster.topology, multi_node={"j": ["node000"]})
