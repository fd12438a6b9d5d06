"""Same decisions: run simulation scenarios on a base revision and on this tree, compare per job.

A refactor that should not change what the scheduler decides is checked here, on this machine, in
one run: every scenario runs twice, once with the code of ``--base REV`` (a temporary detached
``git worktree`` of this script's repository, removed afterwards) and once with the code of the
branch tree (this checkout, or ``--branch-tree PATH``), each in its own ``sys.executable``
subprocess with ``PYTHONPATH`` set to that tree (the script checks that ``bayes_sched`` and
``perfmodel`` were imported from there), one process at a time. The per-job outcomes are compared
exactly: the JCT and, where both sides report them, the start and completion times and the
restarts. Floating point is the same on both sides (same machine, same interpreter, same
libraries), so any difference is a different decision, not roundoff.

Scenarios (issue 34's acceptance list; ``--jobs N`` caps each one's job count):

* ``pollux/workload-1`` .. ``pollux/workload-8``, ``tiresias/workload-*``: the Pollux world as
  ``bayes-sched simulate --workload workload-K --policy P --max-jobs 40`` runs it (16 nodes x 4
  GPUs, 60 s rounds, seed 0); per-job rows from the CLI's own report (``--out DIR``, ``jobs.csv``).
* ``gavel/<policy>`` for every policy of the throughput-table world: ``bayes-sched simulate
  --trace max_min_fairness --max-jobs 30 --cluster v100:4,p100:4,k80:4 --policy <policy>``
  (Gavel's shipped trace, its 360 s rounds and measured throughputs; 12 GPUs, so that the 30 jobs
  contend and the policies' choices matter).
* ``shockwave/tacc_120``: ``bayes-sched simulate --trace tacc_120 --policy shockwave --cluster
  v100:32`` (Shockwave's 120-job trace, its world: tacc throughputs, 120 s rounds).

How a run is driven: through the command line's ``main`` (imported from the tree under test), so
the scenario is the world the CLI builds, whatever the library's internals look like on either
side. The table world's ``simulate --trace`` prints a summary only; when it does not accept
``--out``, the per-job rows are read from the CLI's own trace runner
(``bayes_sched.cli.simulate._table_run``, a private name: the one place to update if the CLI
changes; its output names the path used, ``via``).

    python experiments/same_decisions.py [--base main] [--branch-tree PATH]
        [--scenarios 'pollux/*' gavel/fifo_perf ...] [--jobs N] [--quick] [--json] [--debug]

Exit status: 0 when every scenario is identical, 1 when any differs, 2 when a run failed or the
input was bad (one line naming it).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: Policies of the table world (the CLI's list, as of this script; a scenario per name).
GAVEL_POLICIES = (
    "max_min_fairness", "max_min_fairness_perf", "max_min_fairness_packed",
    "max_sum_throughput_perf", "finish_time_fairness", "finish_time_fairness_perf",
    "finish_time_fairness_packed", "min_total_duration", "min_total_duration_packed",
    "gavel_fifo", "fifo_perf", "fifo_packed", "allox", "gandiva", "gandiva_fair", "elas", "sia")
GAVEL_TRACE = "max_min_fairness"
GAVEL_CLUSTER = "v100:4,p100:4,k80:4"
SHOCKWAVE_CLUSTER = "v100:32"
POLLUX_JOBS, GAVEL_JOBS, SHOCKWAVE_JOBS = 40, 30, 120
#: Per-job fields compared exactly where both sides report them (``jct`` always).
FIELDS = ("jct", "completion_time", "start_time", "restarts")


@dataclass(frozen=True)
class Scenario:
    """One simulation: ``name`` as the table prints it, the CLI's ``simulate`` arguments
    (without ``--max-jobs``, ``--out``, ``--json``) and its job count."""

    name: str
    argv: tuple[str, ...]
    jobs: int
    trace: bool  # the table world (``--trace``): per-job rows may need the trace runner


def all_scenarios(jobs: int | None) -> list[Scenario]:
    """Issue 34's acceptance list; ``jobs`` caps every scenario's job count."""
    def cap(default: int) -> int:
        return default if jobs is None else min(jobs, default)

    found = [Scenario(f"{policy}/workload-{k}",
                      ("--workload", f"workload-{k}", "--policy", policy), cap(POLLUX_JOBS), False)
             for policy in ("pollux", "tiresias") for k in range(1, 9)]
    found += [Scenario(f"gavel/{policy}", ("--trace", GAVEL_TRACE, "--cluster", GAVEL_CLUSTER,
                                            "--policy", policy), cap(GAVEL_JOBS), True)
              for policy in GAVEL_POLICIES]
    found.append(Scenario("shockwave/tacc_120", ("--trace", "tacc_120", "--cluster",
                                                 SHOCKWAVE_CLUSTER, "--policy", "shockwave"),
                          cap(SHOCKWAVE_JOBS), True))
    return found


#: ``--quick``: one workload, two Gavel policies, 10 jobs each.
QUICK = ("pollux/workload-1", "tiresias/workload-1", "gavel/max_min_fairness_perf",
         "gavel/finish_time_fairness_packed")
QUICK_JOBS = 10


def select(scenarios: Sequence[Scenario], patterns: Sequence[str]) -> list[Scenario]:
    """The scenarios whose names match any of ``patterns`` (shell globs), in list order; a
    pattern matching none is an error (ValueError naming it)."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(s.name, pattern) for s in scenarios):
            raise ValueError(f"--scenarios {pattern}: matches no scenario; expected one of "
                             f"{', '.join(s.name for s in scenarios)} or a glob of them")
    return [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]


# The code each subprocess runs, importing bayes_sched from PYTHONPATH (the tree under test). It
# writes {"modules" (bayes_sched's and perfmodel's files), "via", "status", "jobs": [{job, jct,
# ...}]} as JSON to argv[2].
_DRIVER = r'''
import contextlib, io, json, math, sys
from pathlib import Path
spec = json.loads(sys.argv[1]); out = Path(sys.argv[2]); report = out.parent / "report"
import bayes_sched
from bayes_sched.cli import build_parser, main
argv = ["simulate", *spec["argv"], "--max-jobs", str(spec["jobs"]), "--json", "--no-progress"]
via, rows = "cli simulate --out", None
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
    status = main([*argv, "--out", str(report)])
if (report / "jobs.csv").is_file():
    import pandas as pd
    rows = pd.read_csv(report / "jobs.csv")
elif spec["trace"] and status == 2 and "--out" in err.getvalue():
    from bayes_sched.cli.simulate import _table_run
    via = "cli simulate --trace (bayes_sched.cli.simulate._table_run)"
    args = build_parser(argv).parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()):
        _, result, _ = _table_run(args.trace, args.policy, args, args.seed)
    rows, status = result.jobs, 0
if rows is None:
    sys.exit("no per-job rows: " + err.getvalue().strip()[-400:])
keep = [c for c in ("job", "jct", "completion_time", "start_time", "restarts") if c in rows]
jobs = [{k: (None if isinstance(v, float) and math.isnan(v) else v.item() if hasattr(v, "item")
             else v) for k, v in row.items()} for row in rows[keep].to_dict("records")]
for job in jobs:
    job["job"] = str(job["job"])
import perfmodel
out.write_text(json.dumps({"modules": [bayes_sched.__file__, perfmodel.__file__], "via": via,
                           "status": status, "jobs": jobs}))
'''


@dataclass(frozen=True)
class Side:
    """One tree's outcome of a scenario: the files ``bayes_sched`` and ``perfmodel`` were imported
    from, how the rows were read, the CLI's exit status and the per-job rows (dicts of
    :data:`FIELDS` and ``job``)."""

    modules: list[str]
    via: str
    status: int
    jobs: list[dict[str, Any]]


class RunFailed(RuntimeError):
    """A scenario could not be run on a tree (the message names scenario, tree and reason)."""


def run_side(scenario: Scenario, tree: Path, work: Path) -> Side:
    """Run ``scenario`` with the code of ``tree`` in a fresh subprocess (cwd ``work``)."""
    work.mkdir(parents=True)
    spec = json.dumps({"argv": list(scenario.argv), "jobs": scenario.jobs,
                       "trace": scenario.trace})
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _DRIVER, spec, str(work / "side.json")],
                          cwd=work, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (work / "side.json").is_file():
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RunFailed(f"{scenario.name} on {tree}: exit {done.returncode}: {tail}")
    side = Side(**json.loads((work / "side.json").read_text()))
    for module in side.modules:
        if not Path(module).resolve().is_relative_to(tree.resolve()):
            raise RunFailed(f"{scenario.name}: {module} was imported, not the package of "
                            f"{tree} (PYTHONPATH did not win)")
    return side


def _missing(value: object) -> bool:
    """Whether a per-job field is absent (None or NaN: the job did not finish or start)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _differs(a: object, b: object) -> bool:
    """Exact inequality, with two missing values equal."""
    return _missing(a) != _missing(b) or (not _missing(a) and a != b)


def compare_jobs(base: Sequence[Mapping[str, Any]], branch: Sequence[Mapping[str, Any]]
                 ) -> dict[str, Any]:
    """Compare two runs' per-job rows exactly.

    Returns ``identical`` (bool), ``jobs`` (the number of distinct job names), ``max_abs_jct_diff``
    (seconds over jobs finished on both sides; ``inf`` where a job finished on one side only,
    None without any), and ``first_difference``: a one-line description of the first job (in the
    base's order, then the branch's extra jobs) whose fields differ, or None.
    """
    by_base = {str(row["job"]): row for row in base}
    by_branch = {str(row["job"]): row for row in branch}
    names = list(by_base) + [n for n in by_branch if n not in by_base]
    fields = [f for f in FIELDS if f == "jct" or (all(f in r for r in base)
                                                   and all(f in r for r in branch))]
    first: str | None = None
    diffs: list[float] = []
    for name in names:
        if name not in by_base or name not in by_branch:
            first = first or f"job {name}: only in {'base' if name in by_base else 'branch'}"
            continue
        a, b = by_base[name], by_branch[name]
        ja, jb = a.get("jct"), b.get("jct")
        if not _missing(ja) and not _missing(jb):
            diffs.append(abs(float(ja) - float(jb)))  # type: ignore[arg-type]
        elif _missing(ja) != _missing(jb):
            diffs.append(math.inf)
        changed = [f for f in fields if _differs(a.get(f), b.get(f))]
        if changed and first is None:
            first = f"job {name}: " + ", ".join(f"{f} {a.get(f)} -> {b.get(f)}" for f in changed)
    return {"identical": first is None, "jobs": len(names),
            "max_abs_jct_diff": max(diffs) if diffs else None, "first_difference": first}


@contextmanager
def base_tree(rev: str, repo: Path, where: Path) -> Iterator[tuple[Path, str]]:
    """A temporary detached worktree of ``rev`` (removed on exit) and the commit it holds."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                                 f"{rev}^{{commit}}"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except subprocess.CalledProcessError:
        raise ValueError(f"--base {rev}: not a commit of {repo}; expected a revision "
                         "git rev-parse knows") from None
    path = where / "base"
    added = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet",
                            str(path), commit], capture_output=True, text=True, check=False)
    if added.returncode != 0:
        raise ValueError(f"--base {rev}: git worktree add {path} failed: "
                         f"{added.stderr.strip()}")
    try:
        yield path, commit
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                       check=False, capture_output=True)


def run(scenarios: Sequence[Scenario], rev: str, branch: Path, debug: bool = False
        ) -> list[dict[str, Any]]:
    """One row per scenario: base against branch (see :func:`compare_jobs`), or the failure."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="same-decisions-") as tmp, \
            base_tree(rev, REPO, Path(tmp)) as (base, commit):
        for i, scenario in enumerate(scenarios):
            row: dict[str, Any] = {"scenario": scenario.name, "base": commit[:12]}
            try:
                sides = [run_side(scenario, tree, Path(tmp) / f"{i}-{label}")
                         for label, tree in (("base", base), ("branch", branch))]
            except RunFailed as error:
                rows.append({**row, "result": "failed", "error": str(error)})
                continue
            if debug:
                for label, side in zip(("base", "branch"), sides, strict=True):
                    print(f"{scenario.name} {label}: imported {', '.join(side.modules)} via "
                          f"{side.via}, exit {side.status}, {len(side.jobs)} jobs",
                          file=sys.stderr)
            outcome = compare_jobs(sides[0].jobs, sides[1].jobs)
            rows.append({**row, "jobs": outcome["jobs"],
                         "result": "identical" if outcome["identical"] else "different",
                         "max_abs_jct_diff": outcome["max_abs_jct_diff"],
                         "first_difference": outcome["first_difference"],
                         "via": sorted({s.via for s in sides})})
    return rows


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="base revision (default main)")
    parser.add_argument("--branch-tree", type=Path, default=REPO,
                        help="the tree whose code is the branch (default: this checkout)")
    parser.add_argument("--scenarios", nargs="+", metavar="GLOB",
                        help="scenario names or shell globs (default: all, or --quick's)")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="at most N jobs per scenario (default: each scenario's own)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{', '.join(QUICK)} with {QUICK_JOBS} jobs each")
    parser.add_argument("--json", action="store_true", help="print strict JSON")
    parser.add_argument("--debug", action="store_true",
                        help="name on stderr the file each side imported bayes_sched from")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    try:
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs {args.jobs}: expected a positive count of jobs")
        if not (args.branch_tree / "bayes_sched" / "__init__.py").is_file():
            raise ValueError(f"--branch-tree {args.branch_tree}: no bayes_sched package there")
        jobs = args.jobs if args.jobs is not None or not args.quick else QUICK_JOBS
        chosen = all_scenarios(jobs)
        patterns = args.scenarios or (list(QUICK) if args.quick else ["*"])
        scenarios = select(chosen, patterns)
        rows = run(scenarios, args.base, args.branch_tree.resolve(), args.debug)
    except ValueError as error:
        print(f"same_decisions: {error}", file=sys.stderr)
        return 2
    if args.record:
        record_results(__file__, {f"same decisions, base {args.base}": rows})
    if args.json:
        print(json.dumps([{k: _json_safe(v) for k, v in row.items()} for row in rows],
                         indent=2, allow_nan=False))
    else:
        from bayes_sched.tables import print_table

        columns = ("scenario", "jobs", "result", "max_abs_jct_diff", "first_difference")
        print_table([{c: (row.get(c) or row.get("error") or "-") if c == "first_difference"
                      else row.get(c) for c in columns} for row in rows],
                    title=f"same decisions: base {args.base} ({rows[0]['base'] if rows else ''})"
                          f" against {args.branch_tree}")
    if any(row["result"] == "failed" for row in rows):
        for row in rows:
            if row["result"] == "failed":
                print(f"same_decisions: {row['error']}", file=sys.stderr)
        return 2
    return 1 if any(row["result"] == "different" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
