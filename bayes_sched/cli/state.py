"""``bayes-sched state check | repair``: diagnose and salvage the scheduler's state file.

``check`` says what ``state.db`` is (healthy, of an older schema, empty, damaged, another
program's, of a newer schema: :mod:`bayes_sched.service.state_check`) and changes nothing: exit 0
when commands can use it, 2 when not (one line on stderr naming the file). ``repair``
(:mod:`bayes_sched.service.state_repair`) salvages a damaged or empty one into a new file, keeps
the damaged one beside it and lists what could not be read; it refuses while a ``serve`` runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bayes_sched.cli._common import fail
from bayes_sched.cli.service import DEFAULT_STATE
from bayes_sched.tables import print_json

#: Lost keys and unreadable ranges printed per table (``--json`` gives them all).
SHOWN = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    state = subparsers.add_parser("state", help="check or repair the scheduler's state file")
    sub = state.add_subparsers(dest="state_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="say whether the state file is healthy (exit 0) or "
                           "not (exit 2), changing nothing",
                           description="Check the state file's header, schema version, pages "
                                       "and records (PRAGMA quick_check), tables and every "
                                       "JSON column.")
    repair = sub.add_parser("repair", help="salvage a damaged state file into a new one",
                            description="Copy what can be read from a damaged state.db into a "
                                        "new file, keep the damaged one as "
                                        "state.db.damaged-<time>, and list what could not be "
                                        "read. Refused while 'bayes-sched serve' runs.")
    for parser, handler in ((check, _check), (repair, _repair)):
        parser.add_argument("--state", default=DEFAULT_STATE, metavar="DIR",
                            help=f"the scheduler's state directory (default: ./{DEFAULT_STATE})")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.set_defaults(handler=handler)


def _check(args: argparse.Namespace) -> int:
    from bayes_sched.service.state_check import inspect_state

    diagnosis = inspect_state(Path(args.state))
    if args.json:
        print_json(diagnosis.to_dict())
    else:
        version = "-" if diagnosis.version is None else str(diagnosis.version)
        print(f"{diagnosis.path}: {diagnosis.verdict} (schema version {version}, "
              f"{'-' if diagnosis.size is None else diagnosis.size} bytes)")
        for table, rows in diagnosis.rows.items():
            print(f"  {table}: {rows} rows")
        if diagnosis.findings not in ([], ["ok"]):
            for line in diagnosis.findings:
                print(f"  quick_check: {line}")
    if diagnosis.usable:
        return 0
    return fail(f"{diagnosis.path}: {diagnosis.problem}")


def _repair(args: argparse.Namespace) -> int:
    from bayes_sched.service.state_repair import repair_state

    report = repair_state(Path(args.state))
    if args.json:
        print_json(report.to_dict())
        return 0
    if not report.repaired:
        print(f"{report.path}: {report.diagnosis.verdict}: nothing to repair")
        return 0
    print(f"{report.path}: repaired; the damaged file is kept as {report.kept}")
    if report.nothing_read:
        print(f"  nothing could be read: {report.nothing_read}")
    for table in report.tables:
        print(f"  {table.table}: {table.recovered} rows recovered")
        for line in table.unreadable[:SHOWN]:
            print(f"    could not read {line}")
        if len(table.unreadable) > SHOWN:
            print(f"    ... and {len(table.unreadable) - SHOWN} more (see --json)")
        if table.lost:
            more = len(table.lost) - SHOWN
            print(f"    lost ({len(table.lost)}): {', '.join(table.lost[:SHOWN])}"
                  f"{f' and {more} more' if more > 0 else ''}")
    return 0
