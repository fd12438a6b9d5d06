"""``bayes-sched list``: what the registries hold -- policies, estimators (with the needs they
serve) and hidden laws with their typed options and defaults, the worlds, the known GPU types, the
shipped workloads and the simulator's models."""

from __future__ import annotations

import argparse
from typing import Any

from bayes_sched.gpu_types import GPU_TYPES
from bayes_sched.registry import Option, Registry
from bayes_sched.tables import print_table

_WHAT = ("policies", "estimators", "hidden", "worlds", "gpu-types", "workloads", "models")


def option_rows(registry: Registry[Any]) -> list[dict[str, object]]:
    """One row per option of each component of ``registry`` (a component without options: one
    row of dashes): name, option, type, default and the component's summary."""
    rows: list[dict[str, object]] = []
    for name in registry:
        options = registry.options(name)
        if not options:
            rows.append({"name": name, "option": "-", "type": "-", "default": "-",
                         "summary": registry.summary(name)})
        for i, option in enumerate(options.values()):
            default = "(required)" if option.default is Option.REQUIRED else repr(option.default)
            rows.append({"name": name if i == 0 else "", "option": option.name,
                         "type": option.type_name, "default": default,
                         "summary": registry.summary(name) if i == 0 else ""})
    return rows


def _estimator_rows() -> list[dict[str, object]]:
    """One row per estimator option, with the needs each serves (the table world's oracles
    first, then :data:`~bayes_sched.estimation.registry.ESTIMATORS`)."""
    from bayes_sched.cli.estimator_options import no_truth
    from bayes_sched.estimation.registry import ESTIMATORS
    from bayes_sched.sim.oracles import world_oracles
    from bayes_sched.throughputs import load_gavel_throughputs

    rows: list[dict[str, object]] = []
    for registry in (world_oracles(load_gavel_throughputs(), remaining_steps=no_truth),
                     ESTIMATORS):
        for row in option_rows(registry):
            served = ", ".join(registry.serves(str(row["name"]))) if row["name"] else ""
            rows.append({"name": row["name"], "serves": served,
                         **{k: v for k, v in row.items() if k != "name"}})
    return rows


def _workload_rows() -> list[dict[str, object]]:
    """One row per shipped workload: its name for --workload(s), jobs, applications, span."""
    from bayes_sched.sim.workload import WORKLOAD_SETS, read_workload, shipped_workloads_dir

    rows: list[dict[str, object]] = []
    for workload_set in WORKLOAD_SETS:
        for path in sorted(shipped_workloads_dir(workload_set).glob("*.csv"),
                           key=lambda p: (len(p.stem), p.stem)):
            workload = read_workload(path)
            name = path.stem if workload_set == "workloads" else f"{workload_set}/{path.stem}"
            apps = sorted({job.application for job in workload.jobs})
            rows.append({"name": name, "jobs": len(workload),
                         "span_h": workload.jobs[-1].submit_time / 3600.0,
                         "gpus_requested": sum(job.num_replicas for job in workload.jobs),
                         "applications": ", ".join(apps)})
    return rows


def _world_rows() -> list[dict[str, object]]:
    """One row per world: its default cluster, round, policy and policies."""
    from bayes_sched.worlds import WORLDS

    return [{"name": world.name, "cluster": world.default_cluster,
             "round_s": world.round_seconds, "default_policy": world.default_policy,
             "policies": ", ".join(world.policies), "description": world.description}
            for world in WORLDS.values()]


def _model_rows() -> list[dict[str, object]]:
    """One row per application the simulator models (its measured profiles)."""
    from bayes_sched.sim.physics import APPLICATION_NAMES, GPU_TYPE, get_application
    from perfmodel.datasets import pollux_model_dir

    rows: list[dict[str, object]] = []
    for name in APPLICATION_NAMES:
        app = get_application(name)
        limits = app.limits
        rows.append({"name": name, "gpu_type": GPU_TYPE, "max_epochs": app.max_epochs,
                     "examples_per_epoch": app.examples_per_epoch,
                     "init_batch_size": limits.init_batch_size,
                     "max_batch_size": limits.max_batch_size,
                     "local_batch_size": f"{limits.min_local_bsz}-{limits.max_local_bsz}",
                     "profiles": str(pollux_model_dir(name))})
    return rows


def _list(args: argparse.Namespace) -> int:
    from bayes_sched.policies import POLICIES
    from bayes_sched.sim.laws import HIDDEN_LAWS

    if args.what == "policies":
        print_table(option_rows(POLICIES), title="policies (--policy-opt KEY=VALUE)",
                    as_json=args.json)
    elif args.what == "estimators":
        print_table(_estimator_rows(), title="estimators (--estimator [NEED=]NAME, "
                    "--estimator-opt NAME.KEY=VALUE)", as_json=args.json)
    elif args.what == "hidden":
        print_table(option_rows(HIDDEN_LAWS), title="hidden laws (--hidden-opt KEY=VALUE)",
                    as_json=args.json)
    elif args.what == "worlds":
        print_table(_world_rows(), title="worlds (chosen by the jobs: --workload or --trace)",
                    as_json=args.json)
    elif args.what == "workloads":
        print_table(_workload_rows(), title="shipped workloads (--workload NAME)",
                    as_json=args.json)
    elif args.what == "models":
        print_table(_model_rows(), title="applications a workload may name (measured profiles)",
                    as_json=args.json)
    else:
        print_table([{"name": gpu.name, "memory_gib": gpu.memory_bytes / 2**30,
                      "description": gpu.description} for gpu in GPU_TYPES.values()],
                    title="GPU types (--cluster TYPE:GPUS)", as_json=args.json)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list", help="list policies, estimators, hidden laws, worlds, GPU types, workloads or "
                     "models",
        description="List what the registries hold: policies, estimators (with the needs they "
                    "serve) and hidden interference laws with their typed options and "
                    "defaults, the simulated worlds with their defaults, "
                    "defaults, the known GPU types, the shipped workloads, or the models "
                    "(applications) a workload may name.")
    parser.add_argument("what", choices=_WHAT)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=_list)
