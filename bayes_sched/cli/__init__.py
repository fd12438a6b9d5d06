"""The ``bayes-sched`` command line: the front door, the one module that may import every package.

Each sub-command group lives in its own module exposing ``register(subparsers)``. Start-up is kept
light: :data:`COMMANDS` names each command, its module and its one-line help, and only the module
of the command chosen on the command line is imported (``bayes-sched --help`` imports none), so
``bayes-sched collect`` never pays for torch or pyro. Add a command by adding a row. Options are
checked by the parser before any work starts (:mod:`bayes_sched.cli.options`).

Exit statuses: 0 done; 2 bad input or options (one line naming the file, row, column or flag);
3 a simulation whose jobs did not all finish; 130 interrupted (Ctrl-C); 141 stdout closed early
(e.g. piped into ``head``); 1 an unexpected error, a bug: one line with the exception's type
and message (set ``BAYES_SCHED_DEBUG=1`` to see its traceback).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple

from bayes_sched import __version__
from bayes_sched.cli._common import fail, is_user_error, one_line_warnings
from bayes_sched.cli.options import OptionParser
from bayes_sched.interrupts import keep_interrupts

#: Set to a non-empty value to let unexpected exceptions print their traceback.
DEBUG_VARIABLE = "BAYES_SCHED_DEBUG"


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
    "serve": Command("bayes_sched.cli.service", "run the scheduler on a real cluster"),
    "submit": Command("bayes_sched.cli.service", "submit a job file (TOML) to the scheduler"),
    "status": Command("bayes_sched.cli.service", "show the scheduler's jobs and allocations"),
    "cancel": Command("bayes_sched.cli.service", "cancel a job"),
    "events": Command("bayes_sched.cli.service_watch", "show the scheduler's job events"),
    "logs": Command("bayes_sched.cli.service_watch", "print a job's log"),
    "state": Command("bayes_sched.cli.state", "check or repair the scheduler's state file"),
    "list": Command("bayes_sched.cli.listing",
                    "list policies, estimators, hidden laws, worlds, GPU types, workloads or "
                    "models"),
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not an option), if any."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> OptionParser:
    """The parser; with ``argv``, only the chosen command's module is imported and registered
    in full (the others are listed by name and help), without it every module is."""
    chosen = None if argv is None else chosen_command(argv)
    parser = OptionParser(
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


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    with keep_interrupts():
        return _run(argv)


def _run(argv: Sequence[str] | None) -> int:
    try:
        arguments = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(arguments).parse_args(arguments)
        with one_line_warnings():
            status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except Exception as error:
        if _interrupted(error):
            return 130
        if is_user_error(error):
            return fail(str(error))
        if os.environ.get(DEBUG_VARIABLE):  # a bug: one visible line, not a silent exit
            raise
        return fail(f"internal error: {type(error).__name__}: {error} (a bug, not your input: "
                    f"please report it with the command line; set {DEBUG_VARIABLE}=1 for the "
                    "traceback)", status=1)
    return int(status or 0)


def _interrupted(error: BaseException) -> bool:
    """Whether ``error`` wraps a Ctrl-C: compiled code (numba's dispatcher) that a
    ``KeyboardInterrupt`` lands in reports it as a ``SystemError`` caused by it."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
