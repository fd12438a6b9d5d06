"""Search quality and cost, paired: Pollux's average JCT and CPU time on a base revision and on this
tree, per workload and seed, in one run on this machine.

A faster search may decide differently; whether it decides as well is judged over seeds, paired:
for every (workload, seed) both trees simulate the same scenario (``bayes-sched simulate
--workload workload-K --policy pollux --max-jobs N --seed S``: 16 nodes x 4 GPUs, 60 s rounds),
and the ratio of average JCTs (branch over base) is taken per pair. The table gives each pair's
JCTs, ratio and CPU seconds (the subprocess's own user + system time, so another process's load
shows in neither), then the mean ratio with its 90% Student-t interval over the pairs
(:func:`bayes_sched.sim.seeds.mean_interval`) and the summed CPU time of each side.

The base runs from a temporary detached ``git worktree`` of ``--base`` (removed afterwards); each
run is a fresh ``sys.executable`` subprocess with ``PYTHONPATH`` set to its tree, and the script
checks that ``bayes_sched`` and ``perfmodel`` came from there. Sides alternate (base, branch) so a
change of load falls on both alike.

    python experiments/bench_search_quality.py [--base main] [--branch-tree PATH]
        [--workloads 1 2 ... 8] [--seeds 3] [--jobs 40] [--policy pollux] [--json]

``--branch-tree`` runs another checkout as the branch side (e.g. a worktree of the commit under
test, so that edits made here while it runs do not reach it).

Exit status 0; 2 on bad input or a failed run (one line naming it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# Runs one simulation with the tree on PYTHONPATH; writes {"modules", "summary", "cpu_s"} to argv[2].
_DRIVER = r'''
import contextlib, io, json, resource, sys
from pathlib import Path
argv = json.loads(sys.argv[1])
import bayes_sched, perfmodel
from bayes_sched.cli import main
buffer = io.StringIO()
with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
    status = main(argv)
if status not in (0, None):
    sys.exit(f"simulate exited {status}")
summary = json.loads(buffer.getvalue())
usage = resource.getrusage(resource.RUSAGE_SELF)
Path(sys.argv[2]).write_text(json.dumps({
    "modules": [bayes_sched.__file__, perfmodel.__file__],
    "summary": summary[0] if isinstance(summary, list) else summary,
    "cpu_s": usage.ru_utime + usage.ru_stime}))
'''


class RunFailed(RuntimeError):
    """A run could not be made (the message names it)."""


@contextmanager
def base_tree(rev: str) -> Iterator[Path]:
    """A temporary detached worktree of ``rev`` in this repository, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-search-base-") as tmp:
        path = Path(tmp) / "tree"
        done = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path),
                               rev], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RunFailed(f"--base {rev}: git worktree add failed: "
                            f"{done.stderr.strip().splitlines()[-1:]}")
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                           capture_output=True, check=False)


def run_one(tree: Path, argv: list[str], out: Path) -> dict[str, Any]:
    """Simulate ``argv`` with the code of ``tree``; its summary row and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(argv), str(out)],
                          cwd=out.parent, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not out.is_file():
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RunFailed(f"{' '.join(argv)} on {tree}: exit {done.returncode}: {tail}")
    result: dict[str, Any] = json.loads(out.read_text())
    for module in result["modules"]:
        if not Path(module).resolve().is_relative_to(tree.resolve()):
            raise RunFailed(f"{module} was imported, not the package of {tree}")
    return result


def positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text}: expected an integer in [1, 1000]")
    return value


def workload_number(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 8:
        raise argparse.ArgumentTypeError(f"{text}: expected a shipped workload number, 1 to 8")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="the revision to compare with (git rev)")
    parser.add_argument("--branch-tree", type=Path, default=REPO,
                        help="the checkout to run as the branch (default: this one)")
    parser.add_argument("--workloads", nargs="+", type=workload_number, default=list(range(1, 9)))
    parser.add_argument("--seeds", type=positive, default=3, help="seeds 0..N-1 per workload")
    parser.add_argument("--jobs", type=positive, default=40, help="first N jobs of each workload")
    parser.add_argument("--policy", default="pollux")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if not (args.branch_tree / "bayes_sched" / "__init__.py").is_file():
        parser.error(f"--branch-tree {args.branch_tree}: no bayes_sched package there")

    from bayes_sched.sim.seeds import mean_interval

    rows: list[dict[str, Any]] = []
    try:
        with base_tree(args.base) as base, tempfile.TemporaryDirectory() as tmp:
            for k in args.workloads:
                for seed in range(args.seeds):
                    sim = ["simulate", "--workload", f"workload-{k}", "--policy", args.policy,
                           "--max-jobs", str(args.jobs), "--seed", str(seed), "--json",
                           "--no-progress"]
                    tag = f"w{k}-s{seed}"
                    old = run_one(base, sim, Path(tmp) / f"{tag}-base.json")
                    new = run_one(args.branch_tree, sim, Path(tmp) / f"{tag}-branch.json")
                    a, b = float(old["summary"]["avg_jct"]), float(new["summary"]["avg_jct"])
                    rows.append({"workload": k, "seed": seed, "base_avg_jct": a,
                                 "branch_avg_jct": b, "ratio": b / a if a > 0 else math.nan,
                                 "base_cpu_s": old["cpu_s"], "branch_cpu_s": new["cpu_s"]})
                    if not args.json:
                        print(f"workload-{k} seed {seed}: avg JCT {a:.0f} -> {b:.0f} "
                              f"(x{rows[-1]['ratio']:.3f}); CPU {old['cpu_s']:.1f} s -> "
                              f"{new['cpu_s']:.1f} s", flush=True)
    except RunFailed as error:
        print(f"bench_search_quality: {error}", file=sys.stderr)
        return 2
    mean, low, high = mean_interval([r["ratio"] for r in rows])
    base_cpu = sum(r["base_cpu_s"] for r in rows)
    branch_cpu = sum(r["branch_cpu_s"] for r in rows)
    summary = {"base": args.base, "policy": args.policy, "jobs": args.jobs, "pairs": len(rows),
               "ratio_mean": mean, "ratio_lower_90": low, "ratio_upper_90": high,
               "base_cpu_s": base_cpu, "branch_cpu_s": branch_cpu,
               "load_average": os.getloadavg()[0]}
    if args.record:
        record_results(__file__, {"summary": [summary], "pairs": rows})
    if args.json:
        print(json.dumps({"summary": summary, "pairs": rows}, indent=2))
    else:
        print(f"avg JCT ratio branch/base over {len(rows)} pairs: {mean:.4f} "
              f"(90% interval {low:.4f} .. {high:.4f}); CPU {base_cpu:.1f} s -> "
              f"{branch_cpu:.1f} s (x{branch_cpu / base_cpu:.2f}); "
              f"load average {summary['load_average']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
