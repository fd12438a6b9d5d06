"""Fidelity of the simulator: our average JCT per workload and policy vs the Pollux artifact's.

Runs (or reads from a ``bayes-sched compare`` report) Pollux, Tiresias and Optimus on the eight
load-1.0 workloads and prints, per workload and policy, our average JCT, the artifact's published one
(``results-jobload/<policy>-1.0/summary.json``) and their ratio; with ``--inter``, also Pollux with
interference avoidance off and 0 / 25 / 50 % interference against ``results-inter/``.

    python experiments/fidelity.py                       # runs everything (about 10 min on 2 cores)
    python experiments/fidelity.py --from-report sim-report   # reuse a compare run's summary.json
    python experiments/fidelity.py --inter --processes 2
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayes_sched.cli._common import print_table  # noqa: E402
from bayes_sched.policies import make_policy  # noqa: E402
from bayes_sched.sim import SimConfig, run_simulation  # noqa: E402

WORKLOADS = [f"workload-{i}" for i in range(1, 9)]
POLICIES = ("pollux", "tiresias", "optimus")
#: results-inter experiment -> (interference, avoidance)
INTER = {"avoid": (0.0, True), "noavoid": (0.0, False), "inter25": (0.25, False),
         "inter50": (0.5, False)}


def published(folder: str, name: str) -> dict[str, float]:
    path = resources.files("bayes_sched") / "data" / "pollux" / folder / name / "summary.json"
    return json.loads(path.read_text())["avgs"]


def _run(task: tuple[str, str, float, bool]) -> tuple[str, str, float, bool, float]:
    workload, policy_name, interference, avoid = task
    policy = make_policy(policy_name)
    if hasattr(policy, "avoid_interference"):
        policy.avoid_interference = avoid
    result = run_simulation(workload, policy, SimConfig(interference=interference))
    return workload, policy_name, interference, avoid, result.summary["avg_jct"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-report", type=Path, help="a compare report folder to read")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--workloads", nargs="+", default=WORKLOADS)
    parser.add_argument("--inter", action="store_true", help="also the interference experiments")
    parser.add_argument("--inter-workloads", nargs="+", default=WORKLOADS,
                        help="workloads for the interference experiments (default: all 8)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    ours: dict[tuple[str, str], float] = {}
    if args.from_report:
        for row in json.loads((args.from_report / "summary.json").read_text()):
            ours[row["policy"], row["workload"]] = row["avg_jct"]
    tasks = [(w, p, 0.0, True) for p in args.policies for w in args.workloads
             if (p, w) not in ours]
    if args.inter:
        tasks += [(w, "pollux", i, a) for (i, a) in list(INTER.values())[1:]
                  for w in args.inter_workloads]
        tasks += [(w, "pollux", 0.0, True) for w in args.inter_workloads
                  if ("pollux", w) not in ours and (w, "pollux", 0.0, True) not in tasks]
    with ProcessPoolExecutor(args.processes) as pool:
        runs = list(pool.map(_run, tasks))
    inter: dict[tuple[str, str], float] = {}
    for workload, policy, interference, avoid, avg in runs:
        if (interference, avoid) == (0.0, True):
            ours[policy, workload] = avg
        else:
            name = next(k for k, v in INTER.items() if v == (interference, avoid))
            inter[name, workload] = avg

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
        for name in INTER:
            reference = published("results-inter", name)
            chosen = args.inter_workloads
            values = ([ours.get(("pollux", w)) for w in chosen] if name == "avoid"
                      else [inter.get((name, w)) for w in chosen])
            if None in values:
                continue
            o = sum(values) / len(values)
            p = sum(reference[w] for w in chosen) / len(chosen)
            label = "MEAN" if len(chosen) == len(WORKLOADS) else f"MEAN of {len(chosen)}"
            rows.append({"policy": f"pollux-{name}", "workload": label, "ours_avg_jct_s": o,
                         "published_s": p, "ratio": o / p})
    print_table(rows, title="average JCT: ours vs the Pollux artifact (load 1.0)",
                as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
