"""Benchmark: the Bayesian-optimised policy ('bo') side by side with Pollux in the same run.

(a) Pollux workloads without interference: average JCT of bo vs Pollux (target: within 3%).
(b) With hidden interference: ``--hidden contention`` (the contention generator's max-min law,
    with counters the policies can read) and ``--hidden gavel`` (Gavel's measured pairs scaled to
    node sharing), see :mod:`bayes_sched.sim.laws`; or the simple rule of ``--interference``
    (distributed jobs sharing a node slow down by that fraction). Average and p99 JCT of bo vs
    Pollux (target: 15% lower average, lower p99). Pollux is run as in the artifact (a hard rule:
    at most one distributed job per node) and, with ``--blind``, interference-blind (no rule).
(c) Decision time: run ``experiments/bench_sim_speed.py --skip-workload --policies pollux bo``
    with ``--scale-nodes 16 --scale-jobs 64`` (64 GPUs) and ``--scale-nodes 256`` (1,024 GPUs).

Writes a report folder: ``summary.csv``, ``rounds-<workload>-<interference>.csv`` (per round:
predicted vs realised objective, surrogate uncertainty, co-located distributed jobs, learned
residuals), ``rounds-<...>.png`` (predicted vs realised objective and the surrogate's uncertainty
over time, and the co-location residuals it learned) and ``report.md``. Usage::

    PYTHONPATH=. python experiments/bench_bo_policy.py --workloads 1 2 --max-jobs 60 \
        --interference 0 --hidden none contention gavel --processes 2 --report bo-report

``--seed-noise`` also runs Pollux with another search seed: one run per workload is a single
chaotic trajectory, and Pollux against itself with another seed is the noise floor of any
one-workload ratio.

Measured figures (each run's command, commit, date and load): docs/results/bench_bo_policy.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_sched.interference.contention_prior import ContentionPrior
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.policies import BayesOptPolicy, PolluxPolicy
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.sim import SimConfig, run_simulation
from bayes_sched.sim.laws import make_hidden
from bayes_sched.sim.laws.contention import ContentionLaw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

VARIANTS = ("pollux", "pollux-blind", "pollux-seed1", "bo")


def plot_rounds(rounds: pd.DataFrame, title: str, path: Path) -> Path:
    """Per-round report of one bo run as a PNG: predicted (mean +- std) vs realised objective,
    the surrogate's mean posterior std, and the learned co-location residuals over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = rounds["time"] / 3600.0
    figure, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(hours, rounds["realised"], ".", ms=2, label="realised", color="tab:orange")
    axes[0].plot(hours, rounds["predicted_mean"], lw=0.8, label="predicted", color="tab:blue")
    axes[0].fill_between(hours, rounds["predicted_mean"] - rounds["predicted_std"],
                         rounds["predicted_mean"] + rounds["predicted_std"], alpha=0.3,
                         color="tab:blue")
    axes[0].set_ylabel("objective\n(power mean of speedups)")
    axes[0].legend(loc="upper right")
    axes[1].plot(hours, rounds["surrogate_std"], lw=0.8)
    axes[1].set_ylabel("surrogate std\n(log slowdown)")
    for column, label in (("learned_worst_pair", "most harmful pair among the jobs present"),
                          ("learned_chosen_log_factor",
                           "co-runner slowdown of the chosen allocation (mean)")):
        if column in rounds:
            axes[2].plot(hours, rounds[column], lw=0.8, label=label)
    if "learned_prior_chosen" in rounds:
        axes[2].plot(hours, rounds["learned_prior_chosen"], lw=0.8, ls="--",
                     label="contention prior of the chosen allocation (mean)")
    axes[2].set_ylabel("learned log slowdown")
    axes[2].set_xlabel("simulated hours")
    axes[2].legend(loc="lower left", fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def worst_pairs(policy: BayesOptPolicy, count: int = 4) -> str:
    """The ``count`` most harmful learned (job class, co-runner class) pairs with reports, as
    ``job<-co-runner:slowdown%`` ("D": distributed)."""
    pairs = policy.predictor(PairResiduals)
    classes = [f"{app}{flag}" for app in pairs.applications for flag in ("", "D")]
    seen = pairs.observed()
    known = np.argwhere(seen[: len(pairs.mean), : len(pairs.mean)])
    ranked = sorted(known, key=lambda ij: pairs.mean[ij[0], ij[1]])[:count]
    return " ".join(f"{classes[i]}<-{classes[j]}:{100 * (1 - np.exp(pairs.mean[i, j])):.0f}%"
                    for i, j in ranked)


def run_one(task: tuple[str, float, str, str, int | None, int]) -> dict[str, object]:
    workload, interference, hidden_name, variant, max_jobs, seed = task
    warnings.simplefilter("ignore")
    hidden = make_hidden(hidden_name)
    estimators = None
    if variant == "bo":
        # The co-location learning is told the nodes' layout (a real cluster's topology file),
        # not the law; its draws take the run's seed.
        topology = hidden.topology if isinstance(hidden, ContentionLaw) else None
        policy = BayesOptPolicy(ga=GAConfig(seed=seed))
        estimators = {"bo_colocation": {"node_topology": topology}}
    else:
        # pollux-seed1: the artifact's Pollux with another search seed, the noise floor of a
        # one-run comparison (a different trajectory, nothing else changed).
        policy = PolluxPolicy(avoid_interference=variant != "pollux-blind",
                              ga=GAConfig(seed=seed + (variant == "pollux-seed1")))
    result = run_simulation(workload, policy,
                            SimConfig(interference=interference, hidden=hidden, seed=seed),
                            max_jobs=max_jobs, estimators=estimators)
    row: dict[str, object] = {"workload": workload, "interference": interference,
                              "hidden": hidden_name, "seed": seed,
                              "policy": variant, **{k: result.summary[k] for k in
                                                    ("finished", "avg_jct", "p99_jct",
                                                     "makespan")},
                              "decision_median_s": float(np.median(result.decision_seconds)),
                              "estimate_s": result.estimate_seconds,
                              "wall_s": result.wall_seconds}
    if isinstance(policy, BayesOptPolicy):
        rounds = []
        for record in policy.history:
            entry = asdict(record)
            entry.update({f"learned_{k}": v for k, v in entry.pop("learned").items()})
            rounds.append(entry)
        row["rounds"] = rounds
        row["fit_problems"] = int(result.estimator_stats["colocation_fit_problems"])
        row["learned_pairs"] = worst_pairs(policy)
        contention = policy.predictor(ContentionPrior)
        row["contention_fits"] = contention.fits
        row["contention_fit_s_median"] = float(np.median(contention.fit_seconds or [np.nan]))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", type=int, default=list(range(1, 9)))
    parser.add_argument("--interference", nargs="+", type=float, default=[0.0])
    parser.add_argument("--hidden", nargs="+", default=["none"],
                        choices=["none", "contention", "gavel"])
    parser.add_argument("--blind", action="store_true",
                        help="also run interference-blind Pollux where there is interference")
    parser.add_argument("--seed-noise", action="store_true",
                        help="also run Pollux with another search seed (one-run noise floor)")
    parser.add_argument("--max-jobs", type=int, default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="seeds of the policies' searches and draws and of the simulator")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--report", type=Path, default=Path("bo-report"))
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    tasks = [(f"workload-{w}", i, h, v, args.max_jobs, seed) for w in args.workloads
             for seed in args.seeds
             for i in args.interference for h in args.hidden for v in VARIANTS
             if (v != "pollux-blind" or (args.blind and (i > 0 or h != "none")))
             and (v != "pollux-seed1" or args.seed_noise)]
    args.report.mkdir(parents=True, exist_ok=True)
    rows = []
    with ProcessPoolExecutor(args.processes) as pool, (args.report / "runs.jsonl").open("w") as log:
        for row in pool.map(run_one, tasks):
            rows.append(row)
            # Each finished run is kept at once: a later failure loses nothing.
            log.write(json.dumps(row, default=float) + "\n")
            log.flush()
    lines = ["# bo vs Pollux", ""]
    for row in rows:
        if "rounds" in row:
            rounds = pd.DataFrame(row.pop("rounds"))
            name = (f"rounds-{row['workload']}-{row['interference']:g}-{row['hidden']}"
                    f"-seed{row['seed']}.csv")
            rounds.to_csv(args.report / name, index=False)
            plot_rounds(rounds, f"bo on {row['workload']}, hidden {row['hidden']}, "
                        f"interference {row['interference']:g}",
                        args.report / name.replace(".csv", ".png"))
            ok = rounds.dropna(subset=["realised"])
            error = np.log(ok["realised"] / ok["predicted_mean"])
            row["pred_vs_real_corr"] = float(np.corrcoef(ok["predicted_mean"], ok["realised"])[0, 1]
                                             ) if len(ok) > 2 else float("nan")
            row["pred_log_error_median"] = float(np.median(np.abs(error))) if len(ok) else np.nan
            std = rounds["surrogate_std"].dropna().to_numpy()
            quarter = max(len(std) // 4, 1)
            row["surrogate_std_first_last"] = (f"{np.mean(std[:quarter]):.3f}->"
                                               f"{np.mean(std[-quarter:]):.3f}" if len(std) else "")
            row["colocated_rounds"] = int((rounds["colocated_distributed"] > 0).sum())
            row["explore_rounds"] = int((rounds["chosen_rank"] > 0).sum())
            last = rounds.iloc[-1]
            row["avoid_rule_rounds"] = int(rounds["avoiding_choice"].sum())
            row["pairs_observed"] = int(last["learned_pairs_observed"])
    table = pd.DataFrame(rows)
    key = ["workload", "interference", "hidden", "seed"]
    base = table[table.policy == "pollux"].set_index(key)
    for stat in ("avg_jct", "p99_jct", "makespan"):
        table[f"{stat}_vs_pollux"] = [
            getattr(row, stat) / base.loc[(row.workload, row.interference, row.hidden, row.seed),
                                          stat]
            for row in table.itertuples()]
    table.to_csv(args.report / "summary.csv", index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    shown = ["workload", "seed", "interference", "hidden", "policy", "finished", "avg_jct", "p99_jct",
             "avg_jct_vs_pollux", "p99_jct_vs_pollux", "makespan_vs_pollux",
             "decision_median_s"]
    print(json.dumps(table.to_dict("records"), default=str) if args.json
          else table[shown].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    for (interference, hidden), sub in table.groupby(["interference", "hidden"]):
        for variant in ("pollux-blind", "pollux-seed1", "bo"):
            for stat in ("avg_jct", "p99_jct", "makespan"):
                ratios = sub[sub.policy == variant][f"{stat}_vs_pollux"]
                if len(ratios):
                    line = (f"interference {interference:g}, hidden {hidden}: {variant} {stat} / "
                            f"pollux: geometric mean {np.exp(np.mean(np.log(ratios))):.3f} over "
                            f"{len(ratios)} runs (workloads x seeds)")
                    print(line)
                    lines.append(f"- {line}")
    # What interference costs Pollux (the most any policy can gain by avoiding it).
    plain = table[(table.policy == "pollux") & (table.hidden == "none")
                  & (table.interference == 0)].set_index(["workload", "seed"])
    for (interference, hidden), sub in table[table.policy == "pollux"].groupby(
            ["interference", "hidden"]):
        if (interference == 0 and hidden == "none") or plain.empty:
            continue
        keys = list(zip(sub.workload, sub.seed, strict=True))
        sub = sub[[k in plain.index for k in keys]]
        keys = list(zip(sub.workload, sub.seed, strict=True))
        for stat in ("avg_jct", "p99_jct"):
            ratios = sub[stat].to_numpy() / plain.loc[keys, stat].to_numpy()
            if len(ratios):
                line = (f"interference {interference:g}, hidden {hidden}: pollux {stat} with / "
                        f"without it: " + " ".join(f"{w.split('-')[-1]}/{s}:{r:.3f}"
                                                    for (w, s), r in
                                                    zip(keys, ratios, strict=True)))
                print(line)
                lines.append(f"- {line}")
    bo = table[table.policy == "bo"]
    extra = [c for c in ("contention_fits", "contention_fit_s_median", "pred_vs_real_corr",
                         "pred_log_error_median", "surrogate_std_first_last",
                         "colocated_rounds", "explore_rounds", "avoid_rule_rounds",
                         "pairs_observed", "learned_pairs") if c in bo]
    print(bo[["workload", "seed", "interference", "hidden", *extra]].to_string(index=False,
                                                             float_format=lambda v: f"{v:.3g}"))
    lines += ["", "## Per-run surrogate report", "",
              "```", bo[["workload", "seed", "interference", "hidden", *extra]].to_string(index=False),
              "```"]
    (args.report / "report.md").write_text("\n".join(lines) + "\n")
    if args.record:
        record_results(__file__, {
            "runs": table[shown].to_dict("records"),
            "bo's surrogate": bo[["workload", "seed", "interference", "hidden", *extra]]
            .to_dict("records")})


if __name__ == "__main__":
    main()
