"""What the shipped profiles allow of issue 18's coverage targets.

1. Per configuration class: rows and placements, and whether any coverage ``k / rows`` lies within
   5 points of 50% and of 90% at all (the 1-GPU class is one placement).
2. Cold start: the median log(step / compute time) of each multi-GPU class (what 1-GPU rows
   cannot show: their sync time is 0) against the mean of the other five models (all a fleet
   prior can know), next to half of 4x the warm 90% width (how far an interval at the width cap
   centred on the fleet mean reaches).

Run: ``python experiments/bench_perfmodel.py --skip-cost 2> rows.jsonl`` then
``python experiments/perfmodel_reachability.py rows.jsonl`` (the warm widths come from the
per-model JSON lines the benchmark writes to stderr; without them part 2 prints ``?``).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from perfmodel.datasets import POLLUX_MODELS
from perfmodel.profiles import load_pollux_profile
from perfmodel.throughput import CONFIGURATION_CLASSES, configuration_class


def main() -> None:
    quality: dict[tuple[str, str, str], dict] = {}
    for path in sys.argv[1:]:
        with open(path) as lines:
            for line in lines:
                if line.startswith("{"):
                    for row in json.loads(line)["quality"]:
                        quality[row["model"], row["setting"], row["class"]] = row

    print("Rows and placements per class; is any k/rows within 5 points of 50% and of 90%?")
    print(f"{'model':12s} {'class':7s} {'rows':>5s} {'placements':>10s} {'50% possible':>13s} "
          f"{'90% possible':>13s}")
    ratio = {}
    for model in POLLUX_MODELS:
        profile = load_pollux_profile(model)
        classes = configuration_class(profile.num_nodes, profile.num_replicas)
        log_ratio = np.log(profile.step_time / profile.compute_time)
        for index, name in enumerate(CONFIGURATION_CLASSES):
            rows = classes == index
            n = int(rows.sum())
            possible = np.arange(n + 1) / n
            near = [bool(np.any(np.abs(possible - target) <= 0.05 + 1e-12)) for target in (0.5, 0.9)]
            placements = len(np.unique(profile.placement[rows].astype(str)))
            print(f"{model:12s} {name:7s} {n:5d} {placements:10d} {near[0]!s:>13s} {near[1]!s:>13s}")
            if index:
                ratio[model, name] = float(np.median(log_ratio[rows]))

    print("\nCold start: median log(step/compute) per class against the other five models' mean;"
          "\n'cap' is half of 4x the warm 90% width: an interval at the width cap centred on the "
          "fleet mean reaches that far")
    print(f"{'model':12s} {'class':7s} {'ratio':>6s} {'fleet':>6s} {'dev':>6s} {'fleetSD':>7s} "
          f"{'warm90':>7s} {'cap':>6s} {'reach':>6s}")
    for name in CONFIGURATION_CLASSES[1:]:
        for model in POLLUX_MODELS:
            others = np.array([ratio[o, name] for o in POLLUX_MODELS if o != model])
            deviation = ratio[model, name] - others.mean()
            row = quality.get((model, "warm", name))
            warm = row["width90"] if row else float("nan")
            reach = str(abs(deviation) <= 2 * warm) if row else "?"
            print(f"{model:12s} {name:7s} {ratio[model, name]:6.3f} {others.mean():6.3f} "
                  f"{deviation:6.3f} {others.std(ddof=1):7.3f} {warm:7.3f} {2 * warm:6.3f} "
                  f"{reach:>6s}")


if __name__ == "__main__":
    main()
