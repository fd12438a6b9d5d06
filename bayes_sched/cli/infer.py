"""``bayes-sched infer``: Bayesian inference commands.

bayes-sched infer contention STORE --out DIR [--topology FILE] [--steps N] [--seed S] [--json]
bayes-sched infer topology [--sysfs-root PATH] [--no-nvml] [--out FILE] [--json]
bayes-sched infer synthetic OUT_DIR [--nodes N] [--samples T] [--seed S]
bayes-sched infer solo-features --log JOB=FILE [--log JOB=FILE ...] --out FILE
bayes-sched infer interference PAIRS SOLO --jobs A,B[,C...] [--model bayes|gp] [--steps N]
    [--learning-rate R] [--seed S] [--json]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

from bayes_sched.cli._common import fit_cache, progress_bar
from bayes_sched.cli.options import (
    OUT_DIR_RULE,
    OptionError,
    add_cache_options,
    check_cache_dir,
    check_new_dir,
    check_out_dir,
    check_out_file,
    existing_file,
    finite_float,
    int_in_range,
    seed,
)
from bayes_sched.tables import print_table
from perfmodel.errors import UnreliableFitWarning

# The models (pandas, torch, pyro) are imported by the handlers, so ``--help`` stays instant.

#: Bounds of the SVI step counts and of the synthetic store's shape.
STEPS = int_in_range(1, 1_000_000)
LEARNING_RATE = finite_float(0.0, 100.0, min_open=True)
MAX_SYNTHETIC_NODES = 1024
MIN_SYNTHETIC_SAMPLES = 2
MAX_SYNTHETIC_SAMPLES = 1_000_000


def register(subparsers: argparse._SubParsersAction) -> None:
    infer = subparsers.add_parser("infer", help="Bayesian inference: contention, interference")
    commands = infer.add_subparsers(dest="infer_command", metavar="WHAT", required=True)
    _register_contention(commands)
    _register_interference(commands)


def _register_contention(commands: argparse._SubParsersAction) -> None:
    """``infer contention``, ``infer topology`` and ``infer synthetic``."""
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
    contention.add_argument("--out", type=Path, required=True,
                            help=f"report directory; {OUT_DIR_RULE}")
    contention.add_argument(
        "--topology",
        type=existing_file,
        help="node topology JSON (see 'infer topology'); default: 4 PCIe switches x 2 GPUs",
    )
    contention.add_argument(
        "--discover-topology",
        action="store_true",
        help="discover the topology of the node this runs on (the store must come from it)",
    )
    contention.add_argument(
        "--jobs",
        type=existing_file,
        help="jobs CSV (job,node,gpu,solo_step_s) for per-job sensitivity",
    )
    contention.add_argument(
        "--step-times",
        type=existing_file,
        help="step-times CSV (time, one column per job, s); needs --jobs",
    )
    contention.add_argument(
        "--steps", type=STEPS, default=1000, help="SVI steps, in [1, 1000000] (default 1000)"
    )
    contention.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
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
        "bayes_sched.sim.laws.contention_generator) and write it as a counters store, with "
        "the ground truth beside it in truth.json.",
    )
    synthetic.add_argument(
        "out", type=Path, help="new directory: one counters store per node, truth.json, jobs.csv"
    )
    synthetic.add_argument(
        "--nodes", type=int_in_range(1, MAX_SYNTHETIC_NODES), default=4,
        help=f"nodes, in [1, {MAX_SYNTHETIC_NODES}] (default 4)"
    )
    synthetic.add_argument(
        "--samples", type=int_in_range(MIN_SYNTHETIC_SAMPLES, MAX_SYNTHETIC_SAMPLES), default=60,
        help=f"samples, in [{MIN_SYNTHETIC_SAMPLES}, {MAX_SYNTHETIC_SAMPLES}] (default 60)"
    )
    synthetic.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    synthetic.set_defaults(handler=run_synthetic)


def _register_interference(commands: argparse._SubParsersAction) -> None:
    """``infer solo-features`` and ``infer interference``."""
    solo = commands.add_parser(
        "solo-features",
        help="turn nvidia-smi or DCGM logs of jobs run alone into a solo-features table",
        description="Read one counter log per job, recorded while the job ran alone "
        "(nvidia-smi --query-gpu=... --format=csv, or DCGM CSV; formats in "
        "bayes_sched.interference.gpu_counters), and write the solo-features CSV that "
        "'infer interference' reads: one row per job, the median of each counter.",
    )
    solo.add_argument("--log", action="append", required=True, metavar="JOB=FILE",
                      help="a job's name and its counter log; once per job")
    solo.add_argument("--out", required=True, help="the solo-features CSV to write (a new file)")
    solo.set_defaults(handler=run_solo_features)

    interference = commands.add_parser(
        "interference",
        help="predict each job's speed in a candidate co-location",
        description="Fit the interference model to a pairs table and a solo-features table "
        "(formats in bayes_sched.interference.tables) and predict the normalised "
        "speed of each job sharing with the others, with 90% intervals. A saved fit of the same "
        "tables, settings and version is reused (--refit to fit again). --model gp fits the "
        "Gaussian-process model instead (seconds; pairs only: two --jobs); --model gp-censored "
        "the same GP reading a speed of exactly 1 as 'at least 1' (tables whose speeds were "
        "capped at 1, as Gavel's are).",
    )
    interference.add_argument(
        "pairs", type=existing_file, help="pairs CSV: job_a,job_b,speed_a,speed_b"
    )
    interference.add_argument(
        "solo", type=existing_file, help="solo-features CSV: job,<features...>"
    )
    interference.add_argument(
        "--jobs", required=True, help="comma-separated job names sharing a GPU, switch or node"
    )
    interference.add_argument(
        "--model", choices=("bayes", "gp", "gp-censored"), default="bayes",
        help="bayes: the latent-resource model fitted by SVI (default); gp: a Gaussian process "
        "over both jobs' solo features, its hyperparameters by maximum evidence; gp-censored: "
        "the same GP for speeds recorded capped at 1 (a 1 is censored, 'at least 1'; a speed "
        "above 1 is refused)")
    interference.add_argument(
        "--steps", type=STEPS,
        help="SVI steps of --model bayes, in [1, 1000000] (default 2000)")
    interference.add_argument(
        "--learning-rate", type=LEARNING_RATE,
        help="Adam's first learning rate of --model bayes, in (0, 100] (default 0.05; it decays "
        "to a tenth)")
    interference.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    interference.add_argument("--json", action="store_true", help="print the table as JSON")
    add_cache_options(interference)
    interference.set_defaults(handler=run_interference)


def run_contention(args: argparse.Namespace) -> int:
    if args.topology and args.discover_topology:
        raise OptionError("give --topology or --discover-topology, not both")
    if args.jobs is not None and args.step_times is None:
        raise OptionError("--jobs needs --step-times (the observed step times)")
    if args.step_times is not None and args.jobs is None:
        raise OptionError("--step-times needs --jobs (the jobs' placement)")
    check_out_dir(args.out)
    if not args.store.exists():  # (open_counters says the same, after torch's import)
        raise OptionError(f"{args.store}: no such counters store or directory of stores")
    # The topology first: a bad file fails before torch and the model are imported.
    from bayes_sched.topology import NodeTopology, read_topology

    if args.discover_topology:
        from bayes_sched.contention.discovery import discover_topology

        topology = discover_topology().topology
    else:
        topology = read_topology(args.topology) if args.topology else NodeTopology()
    import torch  # only for its error type; the modules below import it anyway

    from bayes_sched.contention.inference import (
        bottlenecks,
        fit_svi,
        open_counters,
        prepare,
        summarise,
    )
    from bayes_sched.contention.jobs import infer_jobs, read_jobs_csv, read_step_times_csv
    from bayes_sched.contention.report import write_report
    from counters.errors import CountersError

    window = prepare(open_counters(args.store), topology, where=str(args.store))
    jobs_inputs = None
    if args.jobs is not None:  # read before the fit: a bad file fails now
        jobs_inputs = (
            read_jobs_csv(str(args.jobs)),
            read_step_times_csv(str(args.step_times), window),
        )
    with progress_bar(not args.json) as progress:
        task = progress.add_task("inference (SVI)", total=2)
        try:
            draws = fit_svi(window, num_steps=args.steps, seed=args.seed)
            posterior = summarise(window, draws)
        except torch.linalg.LinAlgError as error:
            raise CountersError(
                f"{args.store}: the fit failed numerically ({' '.join(str(error).split())[:120]}); "
                "expected counters within physical ranges"
            ) from None
        job_table = None
        if jobs_inputs is not None:
            job_table = infer_jobs(window, draws, *jobs_inputs, seed=args.seed)
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
    if args.out is not None:
        check_out_file(args.out)
    if not args.sysfs_root.is_dir():
        raise OptionError(f"--sysfs-root {args.sysfs_root}: not a folder; expected a sysfs mount")
    from bayes_sched.contention.discovery import discover_topology

    found = discover_topology(args.sysfs_root, use_nvml=not args.no_nvml)
    text = found.topology.to_json()
    if args.out is not None:
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
    check_new_dir(args.out, "OUT_DIR")
    import pandas as pd

    from bayes_sched.sim.laws.contention_generator import GeneratorConfig, generate
    from counters.store import write_store

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


def run_solo_features(args: argparse.Namespace) -> int:
    logs: dict[str, Path] = {}
    for given in args.log:
        job, _, file = given.partition("=")
        if not job.strip() or not file:
            raise OptionError(f"--log {given!r}: expected JOB=FILE (a job name, then its log)")
        if job in logs:
            raise OptionError(f"--log {given!r}: job {job!r} given twice; expected one log each")
        logs[job] = existing_file_option(file, "--log")
    out = check_out_file(args.out)
    from bayes_sched.interference.gpu_counters import solo_features_from_counters

    table = solo_features_from_counters(logs)
    table.to_csv(out, index_label="job")
    print(f"wrote {out}: {len(table)} jobs x {len(table.columns)} features "
          f"({', '.join(table.columns)})")
    return 0


def existing_file_option(text: str, flag: str) -> Path:
    """``text`` as an existing file, else the one-line :class:`OptionError` naming ``flag``."""
    try:
        return existing_file(text)
    except argparse.ArgumentTypeError as error:
        raise OptionError(f"{flag}: {error}") from None


def run_interference(args: argparse.Namespace) -> int:
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if len(jobs) < 2:
        raise OptionError(f"--jobs {args.jobs!r}: expected at least two comma-separated job names")
    if args.model in ("gp", "gp-censored"):
        return run_interference_gp(args, jobs)
    check_cache_dir(args)
    from bayes_sched.interference import (
        FitConfig,
        InterferenceModel,
    )

    pairs, solo = _interference_tables(args, jobs)
    steps = FitConfig.num_steps if args.steps is None else args.steps
    rate = FitConfig.learning_rate if args.learning_rate is None else args.learning_rate
    config = FitConfig(num_steps=steps, seed=args.seed, learning_rate=rate,
                       final_learning_rate=rate / 10)
    with warnings.catch_warnings():
        # Not converged is an error here (require_converged, one line): its warning would say
        # it twice.
        warnings.simplefilter("ignore", UnreliableFitWarning)
        model = InterferenceModel.fit(pairs, solo, config, cache=fit_cache(args))
    model.require_converged()
    table = model.predict_colocation(jobs)
    print_table(
        table.to_dict(orient="records"), title="Predicted normalised speed", as_json=args.json
    )
    return 0


def _interference_tables(args: argparse.Namespace, jobs: list[str]) -> tuple:
    """The checked pairs and solo-features tables of ``infer interference``; every ``--jobs``
    name must have solo features (checked before the fit, not after it)."""
    from bayes_sched.interference import check_pairs_known, read_pairs_csv, read_solo_features_csv

    pairs = read_pairs_csv(args.pairs)
    solo = read_solo_features_csv(args.solo)
    check_pairs_known(pairs, solo, str(args.pairs), str(args.solo))
    unknown = [job for job in jobs if job not in solo.index]
    if unknown:
        known = ", ".join(map(str, solo.index[:8])) + (", ..." if len(solo.index) > 8 else "")
        raise OptionError(
            f"--jobs: unknown job {unknown[0]!r}: expected names from {args.solo} ({known})"
        )
    return pairs, solo


def run_interference_gp(args: argparse.Namespace, jobs: list[str]) -> int:
    """``infer interference --model gp`` or ``gp-censored``: fit the GP co-location model
    (seconds; no saved fit) and predict each of the two jobs next to the other."""
    for flag, value in (("--steps", args.steps), ("--learning-rate", args.learning_rate)):
        if value is not None:
            raise OptionError(f"{flag}: an SVI setting of --model bayes; --model {args.model} "
                              "has none")
    if len(jobs) != 2:
        raise OptionError(f"--jobs {args.jobs!r}: --model {args.model} predicts pairs; "
                          "expected two jobs")
    pairs, solo = _interference_tables(args, jobs)
    from bayes_sched.interference import colocation_observations
    from bayes_sched.interference.gavel import RECORDED_SPEED_CAP
    from bayes_sched.interference.gp import ColocationGP, PairGP
    from bayes_sched.interference.gp_censored import CensoredColocationGP

    if args.model == "gp-censored":
        for column in ("speed_a", "speed_b"):
            above = pairs[pairs[column] > RECORDED_SPEED_CAP]
            if len(above):
                row = above.iloc[0]
                raise OptionError(
                    f"{args.pairs}: {column} {row[column]:g} of the pair {row['job_a']},"
                    f"{row['job_b']}: --model gp-censored reads speeds capped at "
                    f"{RECORDED_SPEED_CAP:g}; expected none above it (--model gp takes them)")
    observations = colocation_observations(pairs)
    model: PairGP
    with warnings.catch_warnings():
        # Not converged is an error here (one line): its warning would say it twice.
        warnings.simplefilter("ignore", UnreliableFitWarning)
        if args.model == "gp-censored":
            model = CensoredColocationGP.fit(observations, solo, cap=RECORDED_SPEED_CAP,
                                             seed=args.seed)
        else:
            model = ColocationGP.fit(observations, solo, seed=args.seed)
    model.require_converged()
    table = model.predict_colocation(jobs)
    print_table(
        table.to_dict(orient="records"), title="Predicted normalised speed (GP)",
        as_json=args.json
    )
    return 0
