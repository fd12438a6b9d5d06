"""``bayes-sched list``: what the registries hold -- policies and hidden laws with their typed
options and defaults, and the known GPU types."""

from __future__ import annotations

import argparse
from typing import Any

from bayes_sched.cli._common import print_table
from bayes_sched.gpu_types import GPU_TYPES
from bayes_sched.registry import Option, Registry

_WHAT = ("policies", "hidden", "gpu-types")


def _option_rows(registry: Registry[Any]) -> list[dict[str, object]]:
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


def _list(args: argparse.Namespace) -> int:
    from bayes_sched.policies import POLICIES
    from bayes_sched.sim.laws import HIDDEN_LAWS

    if args.what == "policies":
        print_table(_option_rows(POLICIES), title="policies (--policy-opt KEY=VALUE)",
                    as_json=args.json)
    elif args.what == "hidden":
        print_table(_option_rows(HIDDEN_LAWS), title="hidden laws (--hidden-opt KEY=VALUE)",
                    as_json=args.json)
    else:
        print_table([{"name": gpu.name, "memory_gib": gpu.memory_bytes / 2**30,
                      "description": gpu.description} for gpu in GPU_TYPES.values()],
                    title="GPU types (--cluster TYPE:GPUS)", as_json=args.json)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list", help="list policies, hidden laws or GPU types with their options",
        description="List what the registries hold: policies and hidden interference laws with "
                    "their typed options and defaults, or the known GPU types.")
    parser.add_argument("what", choices=_WHAT)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=_list)
