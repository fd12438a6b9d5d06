"""Fidelity of the simulator: our average JCT per workload and policy vs the Pollux artifact's.

Runs (or reads from a ``bayes-sched compare`` report) Pollux, Tiresias and Optimus on the eight
load-1.0 workloads and prints, per workload and policy, our average JCT, the artifact's published one
(``results-jobload/<policy>-1.0/summary.json``) and their ratio; with ``--inter``, also Pollux with
interference avoidance off and 0 / 25 / 50 % interference against ``results-inter/``.

    python experiments/fidelity.py                       # runs everything (minutes)
    python experiments/fidelity.py --from-report sim-report   # reuse a compare run's summary.json
    python experiments/fidelity.py --inter --processes 2

Measured figures (each run's command, commit, date and load), and what brought each policy's
ratio where it is: docs/results/fidelity.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayes_sched.policies import PolluxPolicy, make_policy  # noqa: E402
from bayes_sched.policies.pollux import SEARCHES  # noqa: E402
from bayes_sched.sim import SimConfig, run_simulation  # noqa: E402
from bayes_sched.tables import print_table  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

WORKLOADS = [f"workload-{i}" for i in range(1, 9)]
POLICIES = ("pollux", "tiresias", "optimus")
#: results-inter experiment -> (interference, avoidance)
INTER = {"avoid": (0.0, True), "noavoid": (0.0, False), "inter25": (0.25, False),
         "inter50": (0.5, False)}


def published(folder: str, name: str) -> dict[str, float]:
    path = resources.files("bayes_sched") / "data" / "pollux" / folder / name / "summary.json"
    return json.loads(path.read_text())["avgs"]


def _run(task: tuple[str, str, float, bool, int],
         search: str = "nsga2") -> tuple[str, str, float, bool, int, float]:
    """One simulation: ``(policy, workload, interference, avoid, seed)`` -> the same + avg JCT;
    Pollux runs with the genetic ``search`` given."""
    policy_name, workload, interference, avoid, seed = task
    policy = make_policy(policy_name)
    if isinstance(policy, PolluxPolicy):
        policy = PolluxPolicy(avoid_interference=avoid,
                              ga=replace(policy.ga, seed=seed, search=search))
    result = run_simulation(workload, policy, SimConfig(interference=interference))
    return policy_name, workload, interference, avoid, seed, result.summary["avg_jct"]


class ReportError(ValueError):
    """A ``--from-report`` folder this comparison cannot use."""


def report_rows(folder: Path, policies: list[str], workloads: list[str]) -> dict[tuple[str, str],
                                                                              float]:
    """Average JCT by (policy, workload) of the seed-0 runs of a ``bayes-sched compare`` report,
    which must hold every wanted pair, run on the artifact's cluster (``SimConfig()``'s) without
    interference or a hidden law.

    Raises:
        ReportError: naming what is missing or different.
    """
    path = folder / "summary.json"
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file; expected a `bayes-sched compare --out` "
                          "folder") from None
    except (OSError, ValueError) as error:
        raise ReportError(f"{path}: cannot read it as JSON ({error})") from None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ReportError(f"{path}: expected a list of run rows")
    cluster = SimConfig().cluster.describe()
    found: dict[tuple[str, str], float] = {}
    for row in rows:
        if "cluster" not in row:
            raise ReportError(f"{path}: rows name no cluster (a report from an older "
                              "bayes-sched); expected one written by `bayes-sched compare`")
        if int(row.get("seed", 0)) != 0:
            continue
        setting = (row["cluster"], float(row.get("interference", 0.0)), row.get("hidden"))
        if setting != (cluster, 0.0, "none"):
            raise ReportError(
                f"{path}: {row['policy']} on {row['workload']} ran on cluster {setting[0]} with "
                f"interference {setting[1]:g} and hidden law {setting[2]}; expected the "
                f"artifact's setting: cluster {cluster}, interference 0, hidden law none")
        found[row["policy"], row["workload"]] = row["avg_jct"]
    missing = [f"{p} on {w}" for p in policies for w in workloads if (p, w) not in found]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        have = sorted({w for _, w in found}) or ["none"]
        raise ReportError(f"{path}: no seed-0 run of {', '.join(missing[:3])}{more} (its "
                          f"workloads: {', '.join(have[:4])}{', ...' if len(have) > 4 else ''}); "
                          "expected every --policies x --workloads pair")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-report", type=Path, help="a compare report folder to read")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--workloads", nargs="+", default=WORKLOADS)
    parser.add_argument("--inter", action="store_true", help="also the interference experiments")
    parser.add_argument("--inter-workloads", nargs="+", default=WORKLOADS,
                        help="workloads for the interference experiments (default: all 8)")
    parser.add_argument("--settings", nargs="+", choices=list(INTER), default=list(INTER),
                        help="which interference experiments to run (default: all four)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="run the interference experiments with Pollux search seeds 0..N-1 and "
                             "compare the mean over seeds (a single run's seed noise is several %%)")
    parser.add_argument("--search", choices=SEARCHES, default=SEARCHES[0],
                        help="Pollux's genetic search (default: the artifact's NSGA-II)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()

    # Average JCT of every run by (policy, workload, interference, avoid), then search seed; a
    # compare report's rows stand in for the seed-0 runs without interference.
    results: dict[tuple[str, str, float, bool], dict[int, float]] = {}
    if args.from_report:
        try:
            found = report_rows(args.from_report, args.policies, args.workloads)
        except ReportError as error:  # one line, before any simulation starts
            print(f"fidelity.py: error: --from-report {error}", file=sys.stderr)
            return 2
        for (policy, workload), avg in found.items():
            results[policy, workload, 0.0, True] = {0: avg}
    wanted = [(p, w, 0.0, True, 0) for p in args.policies for w in args.workloads]
    if args.inter:
        wanted += [("pollux", w, *INTER[name], seed) for name in args.settings
                   for w in args.inter_workloads for seed in range(args.seeds)]
    tasks = [t for t in dict.fromkeys(wanted) if t[4] not in results.get(t[:4], {})]
    with ProcessPoolExecutor(args.processes) as pool:
        run = partial(_run, search=args.search)
        for policy, workload, interference, avoid, seed, avg in pool.map(run, tasks):
            results.setdefault((policy, workload, interference, avoid), {})[seed] = avg
    ours = {(p, w): by_seed[0] for (p, w, *setting), by_seed in results.items()
            if tuple(setting) == (0.0, True) and 0 in by_seed}
    inter = {(name, w): list(by_seed.values()) for name in INTER for w in args.inter_workloads
             if (by_seed := results.get(("pollux", w, *INTER[name])))}

    rows = []
    for policy in args.policies:
        reference = published("results-jobload", f"{policy}-1.0")
        for workload in args.workloads:
            if (policy, workload) in ours:
                ref = reference[workload]
                rows.append({"policy": policy, "workload": workload,
                             "ours_avg_jct_s": ours[policy, workload], "published_s": ref,
                             "ratio": ours[policy, workload] / ref})
        mine = [r for r in rows if r["policy"] == policy]
        if mine:
            o = sum(r["ours_avg_jct_s"] for r in mine) / len(mine)
            p = sum(r["published_s"] for r in mine) / len(mine)
            rows.append({"policy": policy, "workload": "MEAN", "ours_avg_jct_s": o,
                         "published_s": p, "ratio": o / p})
    if args.inter:
        for name in args.settings:
            reference = published("results-inter", name)
            chosen = args.inter_workloads
            values = [statistics.fmean(inter[name, w]) if (name, w) in inter else None
                      for w in chosen]
            if None in values:
                continue
            for w, value in zip(chosen, values, strict=True):
                row = {"policy": f"pollux-{name}", "workload": w, "ours_avg_jct_s": value,
                       "published_s": reference[w], "ratio": value / reference[w]}
                if args.seeds > 1:
                    low, high = min(inter[name, w]), max(inter[name, w])
                    row["seed_range"] = f"{low / reference[w]:.3f}-{high / reference[w]:.3f}"
                rows.append(row)
            o = sum(values) / len(values)
            p = sum(reference[w] for w in chosen) / len(chosen)
            label = "MEAN" if len(chosen) == len(WORKLOADS) else f"MEAN of {len(chosen)}"
            rows.append({"policy": f"pollux-{name}", "workload": label, "ours_avg_jct_s": o,
                         "published_s": p, "ratio": o / p})
    if args.seeds > 1:  # one set of columns for every row
        rows = [{**row, "seed_range": row.get("seed_range", "")} for row in rows]
    print_table(rows, title="average JCT: ours vs the Pollux artifact (load 1.0)",
                as_json=args.json)
    if args.record:
        record_results(__file__, {"average JCT: ours vs the Pollux artifact (load 1.0)": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
