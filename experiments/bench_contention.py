"""Benchmark the contention network on synthetic clusters with known ground truth.

Prints four tables:

1. identification and denoising, per SVI step budget: accuracy of naming each node's contended
   resource (or "none"; target >= 90%), mean relative error of the multiplexed DRAM counters raw vs
   denoised at the observed samples (target: >= 5x reduction; BayesPerf: 40.1% -> 7.6%, 5.3x),
   90%-interval coverage of the true DRAM traffic, and the same errors for PCIe (NVML, precise);
2. cost on a 64-node window (60 samples x 30 counters per node): SVI wall time, excluding the
   one-off Pyro/PyTorch start-up, on ``--threads`` threads (target <= 1 s on 2 cores);
3. scaling of SVI time with the number of nodes;
4. (before 2.) multi-node jobs: NIC traffic in windows whose samples are missing, estimated per
   node alone vs with the invariant that a job's all-reduce bytes cross every spanned node's NIC.

Run: ``python experiments/bench_contention.py [--seeds 3] [--nodes 64] [--threads 2] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import xarray as xr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bayes_sched.contention.inference import (  # noqa: E402
    fit_svi,
    most_likely_contended,
    prepare,
    summarise,
)
from bayes_sched.sim.laws.contention_generator import GeneratorConfig, generate  # noqa: E402
from counters import schema  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def truth_labels(cluster) -> dict[str, str]:
    names = list(cluster.truth["resource"].values)
    out = {}
    for n, node in enumerate(cluster.truth["node"].values):
        flags = cluster.truth["contended"].values[n]
        out[str(node)] = names[int(np.argmax(flags))] if flags.any() else "none"
    return out


def relative_errors(
    raw: np.ndarray, denoised: np.ndarray, truth: np.ndarray
) -> tuple[float, float]:
    """Mean |x - truth| / truth of raw and denoised values, over samples observed raw."""
    seen = np.isfinite(raw) & (truth > 0)
    return (
        float(np.mean(np.abs(raw[seen] - truth[seen]) / truth[seen])),
        float(np.mean(np.abs(denoised[seen] - truth[seen]) / truth[seen])),
    )


def denoising_errors(posterior: xr.Dataset, resource: str, truth: np.ndarray) -> tuple[float, float]:
    """Relative error of the raw counter and of the posterior median of ``resource``'s rate."""
    return relative_errors(
        posterior[f"raw_{resource}_rate"].values,
        posterior[f"{resource}_rate"].sel(quantile=0.5).values,
        truth,
    )


def accuracy_rows(seeds: int, nodes: int, budgets: list[int]) -> list[dict]:
    rows = []
    for steps in budgets:
        correct = total = 0
        dram_raw, dram_den, dram_cov, pcie_raw, pcie_den = [], [], [], [], []
        for seed in range(seeds):
            cluster = generate(GeneratorConfig(num_nodes=nodes, seed=100 + seed))
            window = prepare(cluster.counters, cluster.topology)
            posterior = summarise(window, fit_svi(window, num_steps=steps, seed=seed))
            predicted = most_likely_contended(posterior)
            for node, label in truth_labels(cluster).items():
                correct += predicted[node] == label
                total += 1
            truth = (
                cluster.truth["perf_dram_read_rate"] + cluster.truth["perf_dram_write_rate"]
            ).values
            raw, den = denoising_errors(posterior, "dram", truth)
            dram_raw.append(raw)
            dram_den.append(den)
            low = posterior["dram_rate"].sel(quantile=0.05).values
            high = posterior["dram_rate"].sel(quantile=0.95).values
            dram_cov.append(float(np.mean((truth >= low) & (truth <= high))))
            truth_pcie = (
                cluster.truth["gpu_gpm_pcie_tx_rate"] + cluster.truth["gpu_gpm_pcie_rx_rate"]
            ).values
            raw, den = denoising_errors(posterior, "pcie", truth_pcie)
            pcie_raw.append(raw)
            pcie_den.append(den)
        rows.append(
            {
                "svi_steps": steps,
                "nodes": total,
                "identification": correct / total,
                "dram_err_raw": float(np.mean(dram_raw)),
                "dram_err_denoised": float(np.mean(dram_den)),
                "dram_reduction": float(np.mean(dram_raw) / np.mean(dram_den)),
                "dram_cov90": float(np.mean(dram_cov)),
                "pcie_err_raw": float(np.mean(pcie_raw)),
                "pcie_err_denoised": float(np.mean(pcie_den)),
            }
        )
    return rows


def multi_node_rows(seeds: int, nodes: int, steps: int, missing: float = 0.5) -> list[dict]:
    """NIC estimates where samples are missing, with and without the multi-node invariant.

    Half the jobs' worth of multi-node jobs (2 nodes each); every other node loses ``missing``
    of its NIC samples. Error and 90% coverage of the true NIC traffic in the gaps.
    """
    results: dict[str, list[tuple[float, float, float]]] = {}
    for seed in range(seeds):
        cluster = generate(
            GeneratorConfig(num_nodes=nodes, multi_node_jobs=nodes // 2, seed=200 + seed)
        )
        ds = cluster.counters.copy(deep=True)
        rng = np.random.default_rng(seed)
        for name in ("network_rx", "network_tx"):
            gone = rng.random(ds[name].shape) < missing
            gone[:, ::2] = False
            ds[name].values = np.where(gone, np.nan, ds[name].values)
            ds[f"{name}_valid"].values = ds[f"{name}_valid"].values & ~gone
        truth = (cluster.truth["network_rx_rate"] + cluster.truth["network_tx_rate"]).values
        spans = {row.job: list(row.nodes) for row in cluster.multi_node.itertuples()}
        labels = truth_labels(cluster)
        for setting, multi_node in (("nodes alone", None), ("multi-node invariant", spans)):
            window = prepare(ds, cluster.topology, multi_node=multi_node)
            posterior = summarise(window, fit_svi(window, num_steps=steps, seed=seed))
            gap = ~np.isfinite(posterior["raw_nic_rate"].values) & (truth > 0)
            nic = posterior["nic_rate"]
            median = nic.sel(quantile=0.5).values[gap]
            low, high = nic.sel(quantile=0.05).values[gap], nic.sel(quantile=0.95).values[gap]
            predicted = most_likely_contended(posterior)
            results.setdefault(setting, []).append(
                (
                    float(np.mean(np.abs(median - truth[gap]) / truth[gap])),
                    float(np.mean((truth[gap] >= low) & (truth[gap] <= high))),
                    float(np.mean([predicted[n] == label for n, label in labels.items()])),
                )
            )
    return [
        {
            "setting": setting,
            "nic_gap_err": float(np.mean([v[0] for v in values])),
            "nic_gap_cov90": float(np.mean([v[1] for v in values])),
            "identification": float(np.mean([v[2] for v in values])),
        }
        for setting, values in results.items()
    ]


def time_svi(nodes: int, steps: int, repeats: int = 3) -> dict:
    cluster = generate(GeneratorConfig(num_nodes=nodes, seed=7))
    counters_per_node = sum(
        int(
            np.prod(
                [
                    cluster.counters.sizes[d]
                    for d in cluster.counters[name].dims
                    if d == schema.DEVICE
                ]
            )
        )
        for name in schema.value_names(cluster.counters)
    )
    window = prepare(cluster.counters, cluster.topology)
    timings, cpu = [], []
    for repeat in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        draws = fit_svi(window, num_steps=steps, seed=repeat)
        timings.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    started = time.perf_counter()
    summarise(window, draws)
    summary_s = time.perf_counter() - started
    return {
        "nodes": nodes,
        "samples": cluster.counters.sizes["time"],
        "counters_per_node": counters_per_node,
        "svi_steps": steps,
        "svi_s": float(np.median(timings)),
        # CPU seconds of this process (all threads): unlike wall time, barely inflated by other
        # work on a shared machine; on one thread it is the unloaded wall time.
        "svi_cpu_s": float(np.median(cpu)),
        "per_step_ms": 1e3 * float(np.median(timings)) / steps,
        "summary_s": summary_s,
    }


def show(rows: list[dict], title: str, as_json: bool, tables: dict[str, list[dict]]) -> None:
    tables[title] = rows
    if as_json:
        print(json.dumps({"table": title, "rows": rows}))
        return
    print(f"\n{title}")
    columns = list(rows[0])
    print("  ".join(f"{c:>17}" for c in columns))
    for row in rows:
        print(
            "  ".join(
                f"{row[c]:>17.4g}" if isinstance(row[c], float) else f"{row[c]:>17}"
                for c in columns
            )
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="synthetic clusters (default 3)")
    parser.add_argument("--nodes", type=int, default=64, help="nodes per cluster (default 64)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--budgets", default="40,100", help="SVI step budgets (default 40,100)")
    parser.add_argument("--cost-only", action="store_true", help="skip the accuracy table")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    budgets = [int(b) for b in args.budgets.split(",")]
    time_svi(2, 5, repeats=1)  # one-off start-up (imports, allocator) kept out of the timings
    tables: dict[str, list[dict]] = {}
    if not args.cost_only:
        show(
            accuracy_rows(args.seeds, args.nodes, budgets),
            f"identification and denoising ({args.seeds} clusters x {args.nodes} nodes)",
            args.json, tables,
        )
        show(
            multi_node_rows(2, 16, budgets[-1]),
            "multi-node jobs: NIC where half the samples of every other node are missing "
            "(2 clusters x 16 nodes)",
            args.json, tables,
        )
    print(
        f"load average: {' '.join(f'{v:.1f}' for v in os.getloadavg())} on "
        f"{os.cpu_count()} CPUs (timings are wall clock; other work on the machine inflates "
        "them)",
        file=sys.stderr,
    )
    show([time_svi(args.nodes, b) for b in budgets], f"cost on {args.threads} thread(s)", args.json,
         tables)
    show(
        [time_svi(n, budgets[0]) for n in (8, 16, 32, 64, 128)],
        f"scaling with nodes ({budgets[0]} SVI steps)",
        args.json, tables,
    )
    if args.record:
        record_results(__file__, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
