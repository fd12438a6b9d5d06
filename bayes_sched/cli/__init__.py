"""The ``bayes-sched`` command line: the front door, the one module that may import every package.

Each sub-command group lives in its own module exposing ``register(subparsers)``. Start-up is kept
light: :data:`COMMANDS` names each command, its module and its one-line help, and only the module
of the command chosen on the command line is imported (``bayes-sched --help`` imports none), so
``bayes-sched collect`` never pays for torch or pyro. Add a command by adding a row.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple

from bayes_sched import __version__
from bayes_sched.cli._common import fail, is_user_error


class Command(NamedTuple):
    """A top-level sub-command: the module whose ``register`` adds it, and its one-line help."""

    module: str
    help: str


#: Every top-level command, in the order ``--help`` lists them. The help must match the one the
#: module registers (tests/test_cli_startup.py checks it).
COMMANDS: dict[str, Command] = {
    "fit": Command("bayes_sched.cli.fit", "fit a throughput or efficiency model"),
    "report": Command("bayes_sched.cli.report", "fit models and write a Markdown report with plots"),
    "demo": Command("bayes_sched.cli.demo",
                    "run the end-to-end demo on the shipped data and write a report"),
    "collect": Command("bayes_sched.cli.collect",
                       "sample node counters into a store and/or a Prometheus endpoint"),
    "counters": Command("bayes_sched.cli.collect", "inspect, validate and export counters"),
    "simulate": Command("bayes_sched.cli.simulate", "simulate one workload under one policy"),
    "compare": Command("bayes_sched.cli.simulate",
                       "simulate policies x workloads and write one report"),
    "infer": Command("bayes_sched.cli.infer", "Bayesian inference: contention, interference"),
    "list": Command("bayes_sched.cli.listing",
                    "list policies, hidden laws or GPU types with their options"),
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not an option), if any."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the chosen command's module is imported and registered
    in full (the others are listed by name and help), without it every module is."""
    chosen = None if argv is None else chosen_command(argv)
    parser = argparse.ArgumentParser(
        prog="bayes-sched",
        description="Bayesian scheduling and performance modelling for GPU deep-learning clusters.",
    )
    parser.add_argument("--version", action="version", version=f"bayes-sched {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = {c.module for name, c in COMMANDS.items() if argv is None or name == chosen}
    for module in sorted(modules):
        importlib.import_module(module).register(subparsers)
    for name, command in COMMANDS.items():
        if name not in subparsers.choices:  # listed by name and help; never parsed
            subparsers.add_parser(name, help=command.help, add_help=False)
    # Modules register every command they hold: keep --help's listing in COMMANDS order.
    order = list(COMMANDS)
    subparsers._choices_actions.sort(key=lambda action: order.index(action.dest))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments)
    args = parser.parse_args(arguments)
    try:
        status = args.handler(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return fail("interrupted", status=130)
    except BrokenPipeError:
        # The reader (``| head``) left: exit 1 without a traceback, as rich's console does and
        # Python's documentation advises; stdout goes to /dev/null so the final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as error:
        if not is_user_error(error):
            raise
        return fail(str(error))
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
