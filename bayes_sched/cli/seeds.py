"""Seeds of ``simulate`` and ``compare``: the ``--seed``/``--seeds`` options and the summary over
seeds they print (the mean of each figure and its 90 % Student-t interval on the mean).

Only the standard library at import time: ``--help`` stays light.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bayes_sched.cli.options import MAX_SEED, OptionError, int_in_range, seed
from bayes_sched.tables import print_json, print_table

if TYPE_CHECKING:
    from bayes_sched.sim.result import RunResult

#: Most seeds one command runs.
MAX_SEEDS = 1000

#: What the intervals over seeds are, for --help, the tables and the JSON.
INTERVAL = ("90% Student-t interval on the mean over seeds (mean +- t(0.95, n-1) sd/sqrt(n)); "
            "one seed gives no interval")

_TABLE_COLUMNS = ("avg_jct", "p99_jct", "makespan", "utilization", "ftf_mean")


def add_seed_options(parser: argparse.ArgumentParser) -> None:
    """``--seed S`` and ``--seeds N``."""
    parser.add_argument("--seed", type=seed, default=0, metavar="S",
                        help="seed of every random stream of a run: the policy's search and "
                             "posterior draws (ga.seed, posterior.seed, seed), the hidden law's "
                             "and the simulator's counters; a seed option set with --policy-opt, "
                             "--hidden-opt or --config keeps its value (default 0)")
    parser.add_argument("--seeds", type=int_in_range(1, MAX_SEEDS), default=None, metavar="N",
                        help=f"run seeds S..S+N-1 (N in [1, {MAX_SEEDS}]) and summarise per "
                             "policy and workload the mean over seeds with its "
                             f"{INTERVAL.replace('%', '%%')}; "
                             "--json then prints each seed's values and the interval")


def seed_list(args: argparse.Namespace) -> list[int]:
    """The seeds to run, ``S..S+N-1``.

    Raises:
        OptionError: when the last seed is beyond :data:`MAX_SEED`.
    """
    count = 1 if args.seeds is None else args.seeds
    if args.seed + count - 1 > MAX_SEED:
        raise OptionError(f"--seeds {count} with --seed {args.seed}: the last seed would be "
                          f"{args.seed + count - 1}; expected seeds up to {MAX_SEED}")
    return list(range(args.seed, args.seed + count))


def print_seed_summary(results: Sequence[RunResult], as_json: bool, title: str,
                       baseline: str | None) -> None:
    """Print the summary over seeds of ``results``: a table of ``mean [lower, upper]`` per policy
    and workload, and the headlines against ``baseline`` (none without one, or with one policy);
    or, with ``as_json``, :func:`bayes_sched.sim.report.seeds_document` (each seed's values under
    ``per_seed``)."""
    from bayes_sched.sim.report import headlines, seeds_document, summary_rows
    from bayes_sched.sim.seeds import interval_suffixes, interval_text, seed_rows

    rows = summary_rows(results)
    lines = headlines(rows, baseline) if baseline and len({r.policy for r in results}) > 1 else []
    document = seeds_document(seed_rows(rows), lines)
    if as_json:
        print_json(document)
        return
    lower, upper = interval_suffixes()
    rows = [{"policy": row["policy"], "workload": row["workload"], "seeds": row["seeds"],
             "finished": row["finished"],
             **{c: interval_text(row[c], row[c + lower], row[c + upper])
                for c in _TABLE_COLUMNS}} for row in document["rows"]]
    print_table(rows, title=f"{title}: mean [{document['interval']}]")
    print_headlines(document["headlines"])


def print_headlines(lines: Sequence[dict[str, Any]]) -> None:
    from bayes_sched.sim.report import headline_text

    for line in lines:
        print(headline_text(line))
