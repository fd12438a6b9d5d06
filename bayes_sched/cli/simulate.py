"""``bayes-sched simulate`` and ``bayes-sched compare``: run the trace-driven cluster simulator."""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.cli._common import fail, progress_bar
from bayes_sched.cli.estimator_options import (
    add_estimator_options,
    check_choices_used,
    choices_for,
    estimator_choices,
)
from bayes_sched.cli.options import (
    DAY,
    DURATION_EPILOG,
    OUT_DIR_RULE,
    OptionError,
    check_out_dir,
    duration,
    finite_float,
    int_in_range,
    positive_int,
)
from bayes_sched.cli.seeds import add_seed_options, print_headlines, print_seed_summary, seed_list
from bayes_sched.errors import InputError
from bayes_sched.policies import POLICIES, make_policy
from bayes_sched.registry import parse_assignments
from bayes_sched.round_timing import DEFAULT_RESTART_DELAY, DEFAULT_ROUND_INTERVAL
from bayes_sched.tables import print_table
from bayes_sched.worlds import (
    GAVEL,
    GAVEL_TRACES,
    POLLUX,
    POLLUX_WORLD_POLICIES,
    SHOCKWAVE,
    TABLE_WORLD_POLICIES,
    World,
    world_of,
)
from bayes_sched.worlds.table import TableWorld

# The simulator (numpy, pandas, torch through the policies) is imported by the handlers, so
# ``--help`` stays instant.
if TYPE_CHECKING:
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.sim import SimConfig
    from bayes_sched.sim.result import RunResult
    from bayes_sched.sim.typed_profiles import TypeProfiles
    from bayes_sched.sim.workload import Workload

#: Exit status of a simulation that ran but left jobs unfinished at its horizon.
EXIT_UNFINISHED = 3


_TABLE_COLUMNS = ("policy", "workload", "finished", "avg_jct", "median_jct", "p99_jct", "makespan",
                  "utilization", "ftf_mean", "ftf_worst", "ftf_p50", "ftf_p90", "ftf_p99",
                  "unfair_fraction", "restarts_per_job", "decision_median_ms",
                  "decision_p95_ms", "wall_s")

#: The columns of ``compare``'s table across both worlds.
_WORLDS_COLUMNS = ("world", "policy", "estimates", "setting", "seed", "finished", "avg_jct",
                   "median_jct", "makespan", "ftf_worst", "ftf_p50", "ftf_p90", "ftf_p99", "unfair_fraction",
                   "wall_s")


def register(subparsers: argparse._SubParsersAction) -> None:
    simulate = subparsers.add_parser(
        "simulate", help="simulate one workload under one policy",
        description="Simulate a workload (a CSV or a shipped name such as workload-6 or "
                    "workloads-2.0/workload-3) under a policy and print its summary; or, with "
                    "--trace, a Gavel .trace file in the throughput-table world (jobs run at "
                    "Gavel's measured steps/s per GPU type) under a Gavel policy, or a 12-column "
                    "Shockwave trace (jobs whose batch size changes, Shockwave's tacc "
                    "throughputs, 120 s rounds) under a Gavel policy or shockwave.",
        epilog=DURATION_EPILOG)
    jobs = simulate.add_mutually_exclusive_group(required=True)
    jobs.add_argument("--workload", help="workload CSV or shipped name (the Pollux world)")
    jobs.add_argument("--trace", metavar="T",
                      help="Gavel .trace file (10 tab-separated columns) or a shipped one "
                           f"({', '.join(GAVEL_TRACES)}): the gavel world, rounds default to "
                           f"{GAVEL.round_seconds:g} s, cluster to {GAVEL.default_cluster}; "
                           f"policies: {', '.join(TABLE_WORLD_POLICIES)}; or a Shockwave "
                           "trace (12 columns) or the shipped tacc_120: the shockwave world "
                           f"({SHOCKWAVE.round_seconds:g} s rounds, {SHOCKWAVE.default_cluster}; "
                           "also shockwave); or a Pollux workload (a CSV "
                           "or a shipped name such as workload-1: the Pollux world, also on "
                           "typed clusters of t4, k80, p100, v100; policies: "
                           f"{', '.join(POLLUX_WORLD_POLICIES)})")
    simulate.add_argument("--policy", default=None, choices=list(POLICIES),
                          help="scheduling policy (default: the world's: "
                               f"{POLLUX.default_policy} for a workload, "
                               f"{GAVEL.default_policy} for a Gavel trace, "
                               f"{SHOCKWAVE.default_policy} for a Shockwave trace; `bayes-sched "
                               "list policies` shows their options)")
    _cluster_options(simulate)
    add_estimator_options(simulate)
    simulate.add_argument("--measurement-noise", type=finite_float(0.0, unit="log units"),
                          default=None, metavar="SD",
                          help="with --trace: standard deviation of the multiplicative noise on "
                               "the steps/s jobs report, log scale (default: the simulator's "
                               "0.05; 0: exact reports; seeded by "
                               "--seed); what a learning estimator (--estimator) learns from")
    simulate.add_argument("--out", help="write the report (tables, timeline, plots) here; "
                          f"{OUT_DIR_RULE}")
    simulate.add_argument("--plot", metavar="DIR",
                          help="write per-GPU-type utilisation over time into DIR (created): "
                               "a PNG and the plotted numbers as CSV per run; on a cluster with "
                               "[[tenants]] also each tenant's GPU-time share vs quota, LTGF, "
                               "slowdown and starved jobs (tenants_*.png)")
    simulate.set_defaults(handler=_simulate)

    compare = subparsers.add_parser(
        "compare", help="simulate policies x workloads and write one report",
        description="Run every policy on every workload (in parallel processes) and write one "
                    "report: summary tables, per-job outcomes, timelines and plots.",
        epilog=DURATION_EPILOG)
    compare.add_argument("--policies", nargs="+", default=["pollux", "tiresias", "optimus", "fifo"],
                         choices=list(POLICIES), metavar="POLICY",
                         help=f"policies to run, of {', '.join(POLICIES)}")
    compare.add_argument("--workloads", nargs="+",
                         default=[f"workload-{i}" for i in range(1, 9)], metavar="WORKLOAD",
                         help="Pollux workloads (the Pollux world; none with --workloads none)")
    compare.add_argument("--traces", nargs="+", default=[], metavar="TRACE",
                         help="Gavel or Shockwave traces: also run every policy of the "
                              "throughput-table world among --policies on them, on the same "
                              "--cluster, and print one table across both worlds")
    _cluster_options(compare)
    add_estimator_options(compare)
    compare.add_argument("--out", default="sim-report",
                         help=f"report folder (default: sim-report); {OUT_DIR_RULE}")
    compare.add_argument("--plot", metavar="DIR",
                         help="where the table world's per-GPU-type utilisation plots go "
                              "(default: OUT/type_utilization, beside the Pollux world's), and "
                              "on a cluster with [[tenants]] the per-tenant plots (also in "
                              "OUT/tenants)")
    compare.add_argument("--baseline", choices=list(POLICIES), metavar="POLICY",
                         help="the policy the report's headlines compare against (default: the "
                              "first of --policies)")
    compare.add_argument("--processes", type=int_in_range(1, 256),
                         default=min(os.cpu_count() or 1, 8),
                         help="parallel simulations (default: CPU count, at most 8; with --ray, "
                              "the cluster's CPUs decide)")
    compare.add_argument("--ray", metavar="ADDRESS",
                         help="run the simulations as tasks on a Ray cluster (one CPU each): "
                              "HOST:PORT as `ray start --head` prints it, or auto for the one "
                              "running on this machine; results equal local processes'. Every "
                              "node needs bayes-sched installed (the cluster extra)")
    compare.set_defaults(handler=_compare)


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="SPEC",
                        help="the cluster: a short spec such as 16x4:t4 (16 nodes of 4 T4 GPUs) "
                             "or v100:36 (nodes of 4), or a TOML/JSON file (see the README); "
                             "default 16x4:t4, the artifact's")
    parser.add_argument("--nodes", type=positive_int,
                        help="nodes of a homogeneous cluster (default 16; at most 65536)")
    parser.add_argument("--gpus-per-node", type=positive_int,
                        help="GPUs per node of a homogeneous cluster (default 4; at most 1024, "
                             "and 2^20 GPUs in all)")
    parser.add_argument("--interval", type=duration(1.0, DAY), metavar="DURATION",
                        help="time per scheduling round, in [1 s, 1 day] (default: the cluster "
                             f"spec's, {DEFAULT_ROUND_INTERVAL:g}s, as serve's)")
    parser.add_argument("--restart-delay", type=duration(0.0, DAY), metavar="DURATION",
                        help="time lost per restart, every application, in [0, 1 day] "
                             f"(default: the cluster spec's, {DEFAULT_RESTART_DELAY:g}s, as "
                             "serve's)")
    parser.add_argument("--interference", type=finite_float(0.0, 1.0, max_open=True),
                        default=0.0,
                        help="slowdown of distributed jobs sharing a node, in [0, 1) (default 0)")
    # The laws' module loads the simulator, so --help names the listing instead of the laws.
    parser.add_argument("--hidden", default=None, metavar="LAW",
                        help="hidden interference no policy sees (default none); "
                             "`bayes-sched list hidden` lists the laws and their options")
    parser.add_argument("--hidden-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the hidden law (repeatable), e.g. demand_spread=0.3")
    parser.add_argument("--policy-opt", action="append", default=[], metavar="[POLICY:]KEY=VALUE",
                        help="a policy option (repeatable; values as in TOML, dotted keys into "
                             "tables), e.g. p=-0.5 or pollux:ga.population=24; without POLICY: "
                             "for every policy run")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file of settings: cluster (a spec string or table), "
                             "[policy.NAME] and [hidden.NAME] option tables; flags win")
    parser.add_argument("--max-jobs", type=positive_int,
                        help="only the first N jobs of each workload")
    parser.add_argument("--no-avoid-interference", action="store_true",
                        help="set avoid_interference = false for the policies that have it "
                             "(Pollux may put several distributed jobs on one node)")
    parser.add_argument("--skip-unknown", action="store_true",
                        help="drop the workload rows whose application is unknown (and say how "
                             "many were dropped) instead of refusing the workload")
    parser.add_argument("--profiles", metavar="DIR",
                        help="your own applications: a folder of NAME/ folders, each with the "
                             "shipped models' profiles (placements.csv, scalability.csv, "
                             "validation-<B>.csv; see the README), taken as measured on the "
                             "cluster's GPU type; a workload may then name them")
    parser.add_argument("--type-profiles", metavar="DIR",
                        help="step times measured per GPU type: a folder of TYPE/MODEL/ "
                             "folders (placements.csv, scalability.csv) or of MODEL/ folders "
                             "with placements-TYPE.csv and scalability-TYPE.csv (see "
                             "docs/guide/clusters.md); used where present, the other types' "
                             "derived, and the results name which")
    add_seed_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


#: Top-level keys of a --config file.
_CONFIG_KEYS = ("cluster", "policy", "hidden", "estimator")


def _read_config(path: str | None) -> dict[str, Any]:
    """The --config TOML file as a table (empty without one)."""
    if path is None:
        return {}
    from perfmodel import textio

    file = Path(path)
    try:  # bounded in size, UTF-8 checked: a binary or endless file is one line, not a crash
        raw = tomllib.loads(textio.read_text(file, InputError))
    except InputError as error:
        raise InputError(f"--config: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"--config: not TOML ({error})", file) from None
    for key, value in raw.items():
        if key not in _CONFIG_KEYS:
            raise InputError(f"--config: unknown key; expected {', '.join(_CONFIG_KEYS)}", file,
                             column=key)
        if key != "cluster" and not (isinstance(value, dict)
                                     and all(isinstance(v, dict) for v in value.values())):
            raise InputError(f"--config: expected [{key}.NAME] tables of options", file,
                             column=key)
    return raw


def _cluster_spec(args: argparse.Namespace, config: Mapping[str, Any],
                  world: World = POLLUX) -> ClusterSpec:
    """The cluster of --cluster, --nodes/--gpus-per-node or --config's, else ``world``'s
    default (its round then the world's)."""
    from bayes_sched.cluster_spec import (
        ClusterSpec,
        check_cluster_size,
        cluster_spec_from_dict,
        load_cluster_spec,
    )

    shape = args.nodes is not None or args.gpus_per_node is not None
    if args.cluster is not None and shape:
        raise InputError("--nodes/--gpus-per-node given with --cluster: expected one or the "
                         "other")
    for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node)):
        if value is not None and value < 1:
            raise InputError(f"{flag} is {value}: expected at least 1")
    if args.cluster is not None:
        return load_cluster_spec(args.cluster)
    if not shape and "cluster" not in config:
        return world.cluster()
    if shape:
        nodes = 16 if args.nodes is None else args.nodes
        gpus = 4 if args.gpus_per_node is None else args.gpus_per_node
        check_cluster_size(nodes, nodes * gpus, gpus, f"--nodes {nodes} --gpus-per-node {gpus}")
        return ClusterSpec.homogeneous(nodes, gpus)
    raw = config["cluster"]
    source = f"{args.config} [cluster]"
    if isinstance(raw, str):
        return cluster_spec_from_dict({"nodes": raw}, source)
    return cluster_spec_from_dict(raw, source)


def _config(args: argparse.Namespace, seed: int = 0) -> SimConfig:
    """The simulation settings; ``seed`` seeds the simulator and the hidden law (where its
    options do not set a seed)."""
    from bayes_sched.sim import SimConfig
    from bayes_sched.sim.laws import HIDDEN_LAWS, make_hidden
    from bayes_sched.sim.seeds import with_seed

    settings = _read_config(args.config)
    cluster = _cluster_spec(args, settings)
    from bayes_sched.sim.typed_profiles import NO_TYPE_PROFILES, check_cluster_types

    profiles = _type_profiles(args) if args.type_profiles is not None else NO_TYPE_PROFILES
    try:
        check_cluster_types(cluster.types, (), profiles)
    except InputError as error:
        given = args.cluster if args.cluster is not None else cluster.describe()
        raise InputError(f"--cluster {given}: {error}") from None
    tables = settings.get("hidden", {})
    if args.hidden is None and len(tables) > 1:
        raise InputError(f"--config: {len(tables)} [hidden.NAME] tables and no --hidden: "
                         "expected one, or --hidden to choose", args.config)
    name = args.hidden or next(iter(tables), "none")
    if args.hidden is not None and args.hidden not in HIDDEN_LAWS:
        raise InputError(f"--hidden {args.hidden}: unknown hidden law; expected one of "
                         f"{', '.join(HIDDEN_LAWS)}")
    options = dict(tables.get(name, {}))
    options.update(parse_assignments(args.hidden_opt, "--hidden-opt"))
    if name in HIDDEN_LAWS:
        options = with_seed(HIDDEN_LAWS.options(name), options, seed)
    where = "--hidden-opt" if args.hidden_opt or not tables else f"--config {args.config}"
    hidden = make_hidden(name, cluster=cluster, where=where, **options)
    return SimConfig(cluster=cluster, interval=args.interval, restart_delay=args.restart_delay,
                     interference=args.interference, hidden=hidden, seed=seed,
                     profiles=profiles)


def _type_profiles(args: argparse.Namespace) -> TypeProfiles:
    """The --type-profiles folder read (the --profiles applications registered first, so their
    per-type step times may be given too)."""
    from bayes_sched.sim.physics import register_profiles
    from bayes_sched.sim.typed_profiles import TypeProfiles

    if args.profiles is not None:
        register_profiles(args.profiles)
    try:
        return TypeProfiles.read(args.type_profiles)
    except InputError as error:
        raise InputError(f"--type-profiles: {error}") from None


def _policy_options(args: argparse.Namespace, names: Sequence[str],
                    seed: int = 0) -> dict[str, dict[str, Any]]:
    """Checked options per policy: the --config tables, then --policy-opt, then
    --no-avoid-interference; ``seed`` for every seed option none of them sets.

    ``names`` may be the part of the run's policies one world runs (``compare``); a
    ``--policy-opt POLICY:KEY=VALUE`` for a policy the run does not hold at all (``--policy`` /
    ``--policies``) is refused, not ignored."""
    from bayes_sched.sim.seeds import with_seed

    settings = _read_config(args.config).get("policy", {})
    unknown = sorted(set(settings) - set(POLICIES))
    if unknown:
        raise InputError(f"--config: unknown policy [policy.{unknown[0]}]; expected one of "
                         f"{', '.join(POLICIES)}", args.config)
    raw: dict[str, dict[str, Any]] = {name: dict(settings.get(name, {})) for name in names}
    run = getattr(args, "policies", None) or [args.policy]
    for item in args.policy_opt:
        prefix, colon, rest = item.partition(":")
        targets = names
        if colon and "=" not in prefix:
            if prefix not in POLICIES:
                raise InputError(f"--policy-opt {item!r}: unknown policy '{prefix}'; expected "
                                 f"one of {', '.join(POLICIES)}")
            if prefix not in run:
                raise InputError(f"--policy-opt {item!r}: policy '{prefix}' is not in this run "
                                 f"({', '.join(run)}); expected an option of a policy run")
            targets, item = [prefix] if prefix in names else [], rest
            # A policy of the run that another world runs still gets its options checked here.
            POLICIES.parse(prefix, [item], "--policy-opt")
        for name in targets:
            _merge(raw[name], parse_assignments([item], "--policy-opt"))
    if args.no_avoid_interference:
        for name in names:
            if "avoid_interference" in POLICIES.options(name):
                raw[name]["avoid_interference"] = False
    where = "--policy-opt" if args.policy_opt or not settings else f"--config {args.config}"
    return {name: POLICIES.check(name, with_seed(POLICIES.options(name), raw[name], seed), where)
            for name in names}


def _merge(into: dict[str, Any], update: Mapping[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def check_horizon(workload: Workload, config: SimConfig) -> None:
    """Refuse, before simulating, a job submitted at or after the horizon (it could never run),
    or an application of --profiles under a hidden law (the laws know the shipped ones only)."""
    from bayes_sched.sim.physics import APPLICATION_NAMES

    theirs = sorted({job.application for job in workload.jobs} - set(APPLICATION_NAMES))
    if theirs and config.hidden is not None:
        raise InputError(f"--hidden {config.hidden.name}: the law models the shipped "
                         f"applications only, and the workload names {', '.join(theirs)} from "
                         "--profiles: expected no hidden law", workload.source or workload.name)
    for job in workload.jobs:
        if job.submit_time >= config.max_time:
            raise InputError(f"job '{job.name}' is submitted at {job.submit_time:g} s, at or after the "
                             f"simulation horizon ({config.max_time:g} s): expected earlier "
                             "submission times", workload.source or workload.name, column="time")


def report_unfinished(results: list[RunResult]) -> int:
    """0 when every job of every run finished; else one line naming them and
    :data:`EXIT_UNFINISHED` (the summaries' JCT statistics then cover the finished jobs only)."""
    lines = []
    for result in results:
        unfinished = result.unfinished
        if unfinished:
            names = ", ".join(unfinished[:5]) + (", ..." if len(unfinished) > 5 else "")
            lines.append(f"{result.policy} on {result.workload}: {len(unfinished)} of "
                         f"{len(result.jobs)} jobs unfinished ({names})")
    if not lines:
        return 0
    config = results[0].config
    horizon = "" if config is None else f" ({config.max_time:g} s)"
    return fail(f"jobs did not finish within the simulation horizon{horizon}: "
                f"{'; '.join(lines)}", status=EXIT_UNFINISHED)


def _read_workload(name: str, args: argparse.Namespace, quiet: bool = False) -> Workload:
    """The workload, cut to --max-jobs; with --skip-unknown, rows of unknown applications are
    dropped and (unless ``quiet``) counted on stderr."""
    from bayes_sched.sim import read_workload
    from bayes_sched.sim.physics import register_profiles

    if args.profiles is not None:
        register_profiles(args.profiles)
    workload = read_workload(name, skip_unknown=args.skip_unknown, max_jobs=args.max_jobs)
    if workload.skipped and not quiet:
        apps = ", ".join(sorted(set(workload.skipped)))
        print(f"bayes-sched: {workload.name}: dropped {len(workload.skipped)} of "
              f"{len(workload) + len(workload.skipped)} rows of unknown applications ({apps})",
              file=sys.stderr)
    return workload.head(args.max_jobs) if args.max_jobs else workload


def _table_run(trace: str, policy_name: str, args: argparse.Namespace, seed: int
               ) -> tuple[dict[str, object], Any, Path]:
    """One run of a Gavel or Shockwave trace in its throughput-table world: its table row (the
    summary), the result, and the trace's path; with ``args.plot`` the per-type utilisation plot
    is written there (and on a cluster with ``[[tenants]]`` the per-tenant plot,
    ``tenants_<policy>_<trace>_seed<S>.png``: :mod:`bayes_sched.sim.tenant_plots`)."""
    from bayes_sched.sim.table_cluster import DEFAULT_MEASUREMENT_NOISE
    from bayes_sched.sim.type_utilization import utilization_series, write_type_utilization

    world = world_of(trace)
    if not isinstance(world, TableWorld):
        raise InputError(f"--trace {trace}: a Pollux workload; expected a Gavel or Shockwave "
                         "trace")
    if not world.runs(policy_name):
        hint = (" (it needs a 12-column Shockwave trace)" if policy_name in SHOCKWAVE.policies
                else "")
        raise InputError(f"--policy {policy_name}: not a policy of the throughput-table world "
                         f"for this trace{hint}; expected one of {', '.join(world.policies)} "
                         "with --trace")
    settings = _read_config(args.config)
    spec = world.cluster(_cluster_spec(args, settings, world), args.interval)
    from bayes_sched.sim.table_cluster import check_measured_types

    try:
        check_measured_types(world.truth(), spec)
    except InputError as error:
        given = args.cluster if args.cluster is not None else spec.describe()
        raise InputError(f"--cluster {given}: {error}") from None
    path = world.trace_path(trace)
    name, jobs = world.read_jobs(trace, max_jobs=args.max_jobs)
    # The world's setting for the policy (Shockwave's table, recompute interval and baselines),
    # unless told otherwise.
    options = {**world.policy_options(policy_name),
               **_policy_options(args, [policy_name])[policy_name]}
    policy = POLICIES.make(policy_name, context={"seed": seed}, **options)
    with progress_bar(enabled=not args.no_progress and not args.json) as progress:
        task = progress.add_task(f"{policy.name} on {name}: jobs finished", total=len(jobs))

        def on_round(cluster: Any) -> None:
            progress.update(task, completed=sum(1 for j in cluster.jobs.values() if not j.active))

        given = getattr(args, "measurement_noise", None)  # compare has no such flag
        noise = DEFAULT_MEASUREMENT_NOISE if given is None else given
        result = world.run(jobs, policy, spec, name=str(path), seed=seed,
                           on_round=on_round, measurement_noise=noise,
                           estimators=choices_for(getattr(policy, "needs", ()),
                                                  estimator_choices(args, settings))
                           if args.command == "compare" else estimator_choices(args, settings))
    if args.plot:
        write_type_utilization(utilization_series(result), args.plot,
                               f"{policy.name}_{name}_seed{seed}", f"{policy.name} on {name}")
        if result.tenants is not None:  # a cluster with [[tenants]]
            from bayes_sched.sim.tenant_plots import write_tenant_plots

            write_tenant_plots(result.tenants, args.plot,
                               f"tenants_{policy.name}_{name}_seed{seed}",
                               f"{policy.name} on {name}: tenants")
    row: dict[str, object] = {"policy": policy.name, "trace": name,
                              "cluster": spec.describe(), "round_s": spec.round_interval,
                              "estimates": _describe_sources(result.estimates_from),
                              **result.summary, "wall_s": result.wall_seconds}
    return row, result, path


def _describe_sources(sources: Mapping[str, str]) -> str:
    from bayes_sched.estimates import describe_sources  # numpy: not at --help

    return describe_sources(sources)


def _simulate_trace(args: argparse.Namespace) -> int:
    """``simulate --trace``: a Gavel or Shockwave trace in its throughput-table world, one run
    per seed; with --out the report every world writes."""
    from bayes_sched.sim import write_report

    if args.plot:
        check_out_dir(args.plot, "--plot", "a folder to write the plots in")
    for flag, value in (("--hidden", args.hidden), ("--interference", args.interference or None),
                        ("--profiles", args.profiles), ("--skip-unknown", args.skip_unknown or None),
                        ("--type-profiles", args.type_profiles)):
        if value is not None:
            raise InputError(f"{flag} is not supported with --trace")
    if args.out:
        check_out_dir(args.out)
    runs = [_table_run(args.trace, args.policy, args, seed) for seed in seed_list(args)]
    rows, results = [row for row, _, _ in runs], [result for _, result, _ in runs]
    path = runs[0][2]
    title = f"{rows[0]['policy']} on {path.stem}"
    if args.seeds is None:
        print_table(rows, title=title, as_json=args.json)
    else:
        print_seed_summary(results, args.json, title, baseline=None)
    if args.out:
        report = write_report(results, args.out)
        if not args.json:
            print(f"report: {report}")
    for result in results:
        unfinished = result.unfinished
        if unfinished:
            stalled = result.summary.get("stalled_at")
            why = ("" if stalled is None else f" (no job held a GPU from {stalled / 3600:g} h "
                   "on while jobs waited: the policy stalled, its warnings say why)")
            return fail(f"{len(unfinished)} of {len(result.jobs)} jobs of {path} unfinished"
                        f"{why}", status=EXIT_UNFINISHED)
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from bayes_sched.sim import run_simulation, write_report

    if args.trace is not None and is_pollux_workload(args.trace):
        args.workload, args.trace = args.trace, None
    if args.trace is None and args.measurement_noise is not None:
        raise InputError("--measurement-noise is supported only with a Gavel or Shockwave "
                         "--trace (jobs there report measured steps/s)")
    if args.trace is not None:
        args.policy = args.policy or world_of(args.trace).default_policy
        return _simulate_trace(args)
    args.policy = args.policy or POLLUX.default_policy
    check_pollux_world_policy(args.policy)
    from bayes_sched.sim.report import summary_rows

    if args.plot:
        check_out_dir(args.plot, "--plot", "a folder to write the plots in")

    seeds = seed_list(args)
    configs = [_config(args, seed) for seed in seeds]
    if args.out:
        check_out_dir(args.out)
    workload = _read_workload(args.workload, args)
    options = [_policy_options(args, [args.policy], seed)[args.policy] for seed in seeds]
    choices = estimator_choices(args, _read_config(args.config))
    check_horizon(workload, configs[0])
    results: list[RunResult] = []
    with progress_bar(enabled=not args.no_progress and not args.json) as progress:
        for seed, config, policy_options in zip(seeds, configs, options, strict=True):
            policy = make_policy(args.policy, **policy_options)
            label = "" if args.seeds is None else f" (seed {seed})"
            task = progress.add_task(f"{policy.name} on {workload.name}{label}: jobs finished",
                                     total=len(workload))

            def on_round(cluster, task=task) -> None:  # noqa: ANN001
                done = sum(1 for job in cluster.jobs.values() if not job.active)
                progress.update(task, completed=done)

            results.append(run_simulation(workload, policy, config, on_round=on_round,
                                          estimators=choices))
    title = f"{args.policy} on {workload.name}"
    if args.seeds is None:
        _print(summary_rows(results), args.json, title)
    else:
        print_seed_summary(results, args.json, title, baseline=None)
    if args.out:
        write_report(results, args.out)
    if args.plot:
        from bayes_sched.sim.type_utilization import utilization_series, write_type_utilization

        for r in results:
            write_type_utilization(utilization_series(r), args.plot,
                                   f"{r.policy}_{r.workload}_seed{r.seed}",
                                   f"{r.policy} on {r.workload}")
            if r.tenants is not None:  # a cluster with [[tenants]]
                from bayes_sched.sim.tenant_plots import write_tenant_plots

                write_tenant_plots(r.tenants, args.plot,
                                   f"tenants_{r.policy}_{r.workload}_seed{r.seed}",
                                   f"{r.policy} on {r.workload}: tenants")
    return report_unfinished(results)


def is_pollux_workload(trace: str) -> bool:
    """Whether ``--trace`` names a Pollux workload (:meth:`PolluxWorld.accepts`)."""
    return POLLUX.accepts(trace)


def check_pollux_world_policy(policy: str) -> None:
    """Refuse a policy that cannot run in the Pollux world (one line naming --policy)."""
    if POLLUX.runs(policy):
        return
    hint = (" (Sia's adaptive form there is sia_adaptive)" if policy == "sia" else
            " (it runs Gavel or Shockwave traces: --trace)")
    raise InputError(f"--policy {policy}: not a policy of the Pollux world{hint}; expected one "
                     f"of {', '.join(POLLUX.policies)} with a Pollux workload")


def _run_one(task: tuple[str, str, dict[str, Any], SimConfig, argparse.Namespace]
             ) -> RunResult:
    from bayes_sched.sim import run_simulation

    workload_name, policy_name, options, config, args = task
    workload = _read_workload(workload_name, args, quiet=True)
    policy = make_policy(policy_name, **options)
    choices = choices_for(getattr(policy, "needs", ()),
                          estimator_choices(args, _read_config(args.config)))
    return run_simulation(workload, policy, config, estimators=choices)


def _compare(args: argparse.Namespace) -> int:
    import numpy as np
    import pandas as pd

    seeds = seed_list(args)
    workloads = [] if args.workloads == ["none"] else list(args.workloads)
    table_policies = [p for p in args.policies
                      if SHOCKWAVE.runs(p) or GAVEL.runs(p)] if args.traces else []
    pollux_policies = [p for p in args.policies if POLLUX.runs(p)] \
        if workloads else []
    for name in args.policies:
        if name not in table_policies and name not in pollux_policies:
            where = ("the Pollux world (--workloads)" if not args.traces else
                     "either world (--workloads: the Pollux world; --traces: the table world)")
            raise InputError(f"--policies {name}: cannot run in {where}; expected one of "
                             f"{', '.join(POLLUX_WORLD_POLICIES)} with --workloads"
                             + (f", or {', '.join(TABLE_WORLD_POLICIES)} with --traces"
                                if args.traces else ""))
    check_choices_used(estimator_choices(args, _read_config(args.config)),
                       {name: tuple(getattr(POLICIES[name], "needs", ()))
                        for name in args.policies})
    if not args.traces:
        return _compare_pollux_world(args, seeds, args.policies, workloads)
    for trace in args.traces:  # fail fast on a bad trace or a policy its world cannot run
        _check_trace(trace)
    check_out_dir(args.out)
    rows: list[dict[str, object]] = []
    if pollux_policies:
        status = _compare_pollux_world(args, seeds, pollux_policies, workloads, quiet=True)
        if status not in (0, EXIT_UNFINISHED):
            return status
        summary = pd.read_csv(Path(args.out) / "summary.csv")
        for row in summary.to_dict("records"):
            rows.append({"world": "pollux", "setting": f"{row['workload']} on {row['cluster']}",
                         **row})
    if args.plot is None:
        args.plot = str(Path(args.out) / "type_utilization")
    table_results: list[RunResult] = []
    for trace in args.traces:
        for name in table_policies:
            for seed in seeds:
                try:
                    row, result, path = _table_run(trace, name, args, seed)
                except InputError as error:
                    if "not a policy of the throughput-table world" in str(error):
                        continue  # shockwave on a Gavel trace: that pair does not exist
                    raise
                table_results.append(result)
                rows.append({"world": "table", "setting": f"{path.stem} on {row['cluster']}",
                             "seed": seed, **row})
    table = [{k: row.get(k, np.nan) for k in _WORLDS_COLUMNS} for row in rows]
    (Path(args.out)).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(table).to_csv(Path(args.out) / "worlds.csv", index=False)
    print_table(table, title="policies across both worlds", as_json=args.json)
    from bayes_sched.sim.tenant_plots import write_tenant_report

    tenants = write_tenant_report(table_results, Path(args.out) / "tenants")
    if not args.json:
        print(f"report: {Path(args.out) / 'worlds.csv'}")
        if tenants is not None:
            print(f"tenants: {tenants}")
    return 0


def _check_trace(trace: str) -> None:
    """Refuse a --traces entry that is no Gavel or Shockwave trace (one line naming it)."""
    world = world_of(trace, "--traces")
    if world is POLLUX:
        raise InputError(f"--traces {trace}: a Pollux workload; expected a Gavel or Shockwave "
                         "trace (Pollux workloads go in --workloads)")
    assert isinstance(world, TableWorld)
    if not world.trace_path(trace).is_file():
        raise InputError(f"--traces {trace}: no such trace file; expected a Gavel or "
                         "Shockwave trace or a shipped name")


def _compare_pollux_world(args: argparse.Namespace, seeds: list[int], policies: list[str],
                          workloads: list[str], quiet: bool = False) -> int:
    """``compare`` in the Pollux world: every policy on every workload, one report."""
    from bayes_sched.sim import write_report
    from bayes_sched.sim.report import headlines, policy_rows, summary_rows

    configs = {seed: _config(args, seed) for seed in seeds}
    options = {seed: _policy_options(args, policies, seed) for seed in seeds}
    baseline = policies[0] if args.baseline is None else args.baseline
    if baseline not in policies:
        raise OptionError(f"--baseline {baseline}: not among --policies "
                          f"({', '.join(policies)}); expected one of them")
    check_out_dir(args.out)
    for name in workloads:  # fail fast, before any process starts
        check_horizon(_read_workload(name, args), configs[seeds[0]])
    tasks = [(w, p, options[seed][p], configs[seed], args)
             for seed in seeds for p in policies for w in workloads]
    # Longest first (Pollux), so the pool's tail is short.
    tasks.sort(key=lambda t: t[1] != "pollux")
    with ExitStack() as stack:
        if args.ray is not None:  # a bad address fails here, in one line, before any run
            from bayes_sched.backends.ray_session import connect_ray
            stack.callback(connect_ray(args.ray).close)
        results = _run_tasks(tasks, args)
    order = {(p, w): i for i, (p, w) in enumerate(
        (p, w) for p in policies for w in workloads)}
    results.sort(key=lambda r: (order.get((r.policy, r.workload.split("-first")[0]), 0), r.seed))
    report = write_report(results, args.out, baseline)
    rows = summary_rows(results)
    if quiet:
        return report_unfinished(results)
    if args.seeds is None:
        _print(rows, args.json, "runs")
    else:
        print_seed_summary(results, args.json, "runs", baseline)
    if not args.json:
        keep = ("policy", "workloads", "avg_jct", "median_jct", "p99_jct", "makespan",
                "utilization", "ftf_mean", "decision_median_ms", "wall_s")
        print_table([{k: row[k] for k in keep} for row in policy_rows(rows)],
                    title="mean over workloads")
        if args.seeds is None and len(policies) > 1:
            print_headlines(headlines(rows, baseline))
        print(f"report: {report}")
    return report_unfinished(results)


def _run_tasks(tasks: list[tuple[str, str, dict[str, Any], SimConfig, argparse.Namespace]],
               args: argparse.Namespace) -> list[RunResult]:
    """Every task's result, in any order: on the Ray cluster this process is connected to
    (``--ray``), else in ``--processes`` local processes."""
    results: list[RunResult] = []
    with progress_bar(enabled=not args.no_progress and not args.json) as progress:
        bar = progress.add_task("simulations", total=len(tasks))
        if args.ray is not None:
            from bayes_sched.backends.ray_tasks import run_on_ray

            return run_on_ray(_run_one, tasks, on_result=lambda _: progress.advance(bar))
        if args.processes <= 1:
            for task in tasks:
                results.append(_run_one(task))
                progress.advance(bar)
            return results
        with ProcessPoolExecutor(max_workers=args.processes) as pool:
            futures = [pool.submit(_run_one, task) for task in tasks]
            for future in as_completed(futures):
                results.append(future.result())
                progress.advance(bar)
    return results


def _print(rows: list[dict[str, object]], as_json: bool, title: str) -> None:
    print_table([{k: row[k] for k in _TABLE_COLUMNS} for row in rows], title=title,
                as_json=as_json)
