"""``bayes-sched infer``: Bayesian inference commands.

bayes-sched infer contention STORE --out DIR [--topology FILE] [--steps N] [--seed S] [--json]
bayes-sched infer topology [--sysfs-root PATH] [--no-nvml] [--out FILE] [--json]
bayes-sched infer synthetic OUT_DIR [--nodes N] [--samples T] [--seed S]
bayes-sched infer interference PAIRS SOLO --jobs A,B[,C...] [--steps N] [--seed S] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from bayes_sched.cli._common import print_table, progress_bar
from bayes_sched.contention.discovery import discover_topology
from bayes_sched.contention.generator import GeneratorConfig, generate
from bayes_sched.contention.inference import (
    bottlenecks,
    fit_svi,
    open_counters,
    prepare,
    summarise,
)
from bayes_sched.contention.jobs import infer_jobs, read_jobs_csv, read_step_times_csv
from bayes_sched.contention.report import write_report
from bayes_sched.contention.topology import NodeTopology, TopologyError, read_topology
from bayes_sched.interference import (
    FitConfig,
    InterferenceInputError,
    InterferenceModel,
    read_pairs_csv,
    read_solo_features_csv,
)
from counters.errors import CountersError
from counters.store import write_store


def register(subparsers: argparse._SubParsersAction) -> None:
    infer = subparsers.add_parser("infer", help="Bayesian inference: contention, interference")
    commands = infer.add_subparsers(dest="infer_command", metavar="WHAT", required=True)

    contention = commands.add_parser(
        "contention",
        help="infer hidden resource contention from a counters store",
        description="Fit the contention network to a counters store (SVI) and write a Markdown "
        "report with plots: posterior load per resource, raw vs denoised counters, "
        "the most likely bottlenecks.",
    )
    contention.add_argument(
        "store", type=Path, help="counters store, or a directory of stores (one per node)"
    )
    contention.add_argument("--out", type=Path, required=True, help="report directory")
    contention.add_argument(
        "--topology",
        type=Path,
        help="node topology JSON (see 'infer topology'); default: 4 PCIe switches x 2 GPUs",
    )
    contention.add_argument(
        "--discover-topology",
        action="store_true",
        help="discover the topology of the node this runs on (the store must come from it)",
    )
    contention.add_argument(
        "--jobs", type=Path, help="jobs CSV (job,node,gpu,solo_step_s) for per-job sensitivity"
    )
    contention.add_argument(
        "--step-times", type=Path, help="step-times CSV (time, one column per job, s); needs --jobs"
    )
    contention.add_argument("--steps", type=int, default=100, help="SVI steps (default 100)")
    contention.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    contention.add_argument("--json", action="store_true", help="print the table as JSON")
    contention.set_defaults(handler=run_contention)

    topology = commands.add_parser(
        "topology",
        help="discover this node's topology (sysfs PCIe tree, NVML) as a topology file",
        description="Find the GPUs, the PCIe switch each hangs off, NUMA nodes and NICs "
        "(NVML where the driver answers, else sysfs) and print the topology JSON that "
        "'infer contention --topology' reads. Host memory bandwidth cannot be discovered: "
        "dram_capacity keeps its default (edit the file).",
    )
    topology.add_argument(
        "--sysfs-root", type=Path, default=Path("/sys"), help="sysfs mount (default /sys)"
    )
    topology.add_argument("--no-nvml", action="store_true", help="use sysfs only")
    topology.add_argument("--out", type=Path, help="also write the topology JSON to this file")
    topology.add_argument(
        "--json", action="store_true", help="print only the topology JSON (no notes)"
    )
    topology.set_defaults(handler=run_topology)

    synthetic = commands.add_parser(
        "synthetic",
        help="write a synthetic counters store with known hidden contention",
        description="Generate a cluster window with hidden contention (see "
        "bayes_sched.contention.generator) and write it as a counters store, with "
        "the ground truth beside it in truth.json.",
    )
    synthetic.add_argument(
        "out", type=Path, help="new directory: one counters store per node, truth.json, jobs.csv"
    )
    synthetic.add_argument("--nodes", type=int, default=4, help="nodes (default 4)")
    synthetic.add_argument("--samples", type=int, default=60, help="samples (default 60)")
    synthetic.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synthetic.set_defaults(handler=run_synthetic)

    interference = commands.add_parser(
        "interference",
        help="predict each job's speed in a candidate co-location",
        description="Fit the interference model to a pairs table and a solo-features table "
        "(formats in bayes_sched.interference.tables) and predict the normalised "
        "speed of each job sharing with the others, with 90% intervals.",
    )
    interference.add_argument("pairs", type=Path, help="pairs CSV: job_a,job_b,speed_a,speed_b")
    interference.add_argument("solo", type=Path, help="solo-features CSV: job,<features...>")
    interference.add_argument(
        "--jobs", required=True, help="comma-separated job names sharing a GPU, switch or node"
    )
    interference.add_argument("--steps", type=int, default=1000, help="SVI steps (default 1000)")
    interference.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    interference.add_argument("--json", action="store_true", help="print the table as JSON")
    interference.set_defaults(handler=run_interference)


def run_contention(args: argparse.Namespace) -> int:
    if args.topology and args.discover_topology:
        raise TopologyError("give --topology or --discover-topology, not both")
    if args.discover_topology:
        topology = discover_topology().topology
    else:
        topology = read_topology(args.topology) if args.topology else NodeTopology()
    window = prepare(open_counters(args.store), topology, where=str(args.store))
    with progress_bar(not args.json) as progress:
        task = progress.add_task("inference (SVI)", total=2)
        draws = fit_svi(window, num_steps=args.steps, seed=args.seed)
        posterior = summarise(window, draws)
        job_table = None
        if args.jobs is not None:
            if args.step_times is None:
                raise TopologyError("--jobs needs --step-times (the observed step times)")
            job_table = infer_jobs(
                window,
                draws,
                read_jobs_csv(str(args.jobs)),
                read_step_times_csv(str(args.step_times), window),
                seed=args.seed,
            )
        progress.update(task, advance=1, description="writing report")
        report = write_report(posterior, args.out, source=str(args.store), jobs=job_table)
        progress.update(task, advance=1)
    print_table(
        bottlenecks(posterior),
        title=f"Most likely bottlenecks (report: {report})",
        as_json=args.json,
    )
    return 0


def run_topology(args: argparse.Namespace) -> int:
    found = discover_topology(args.sysfs_root, use_nvml=not args.no_nvml)
    text = found.topology.to_json()
    if args.out is not None:
        if args.out.exists():
            raise TopologyError(f"{args.out}: already exists; give a new file")
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
        return 0
    rows = [
        {"switch": s, "pci_uplink": uplink, "gpus": count, "numa_node": numa}
        for s, (uplink, count, numa) in enumerate(
            zip(
                found.switches,
                found.topology.gpus_per_switch,
                found.topology.switch_numa,
                strict=True,
            )
        )
    ]
    print_table(rows, title=f"Topology from {found.source} ({len(found.gpus)} GPUs)", as_json=False)
    print(text)
    for note in found.notes:
        print(f"note: {note}")
    return 0


def run_synthetic(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise CountersError(f"{args.out}: already exists; give a new directory")
    cluster = generate(
        GeneratorConfig(num_nodes=args.nodes, num_samples=args.samples, seed=args.seed)
    )
    for node in cluster.counters["node"].values:
        write_store(cluster.counters.sel(node=[node]), args.out / str(node))
    truth = {
        "scenario": cluster.scenario,
        "contended": {
            str(node): [
                str(r)
                for r, flag in zip(cluster.truth["resource"].values, row, strict=True)
                if flag
            ]
            for node, row in zip(
                cluster.truth["node"].values, cluster.truth["contended"].values, strict=True
            )
        },
        "topology": json.loads(cluster.topology.to_json()),
    }
    (args.out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    jobs = cluster.jobs.rename(columns={"base_step_s": "solo_step_s"})
    jobs[["job", "node", "gpu", "solo_step_s"]].to_csv(args.out / "jobs.csv", index=False)
    steps = cluster.step_time.to_pandas()
    steps.index = pd.DatetimeIndex(steps.index).strftime("%Y-%m-%dT%H:%M:%S.%f")
    steps.rename_axis("time").to_csv(args.out / "step_times.csv")
    print(f"wrote {args.out} ({args.nodes} nodes x {args.samples} samples) with truth.json")
    return 0


def run_interference(args: argparse.Namespace) -> int:
    pairs = read_pairs_csv(args.pairs)
    solo = read_solo_features_csv(args.solo)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if len(jobs) < 2:
        raise InterferenceInputError("--jobs: expected at least two comma-separated job names")
    model = InterferenceModel.fit(pairs, solo, FitConfig(num_steps=args.steps, seed=args.seed))
    model.require_converged()
    table = model.predict_colocation(jobs)
    print_table(
        table.to_dict(orient="records"), title="Predicted normalised speed", as_json=args.json
    )
    return 0
