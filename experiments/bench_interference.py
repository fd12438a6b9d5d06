"""Validate the interference model on Gavel's measured co-locations, side by side with baselines.

Settings: random splits of the pairs (80/20, by pair) and leave-one-job-type-out (every pair
involving
one of the 26 job types, on all three GPUs, is held out: a cold start from solo features). Methods
see
the same splits and the same solo features (of the target job and of its neighbour):

- mean: the training mean speed; interval from training residual quantiles.
- linear: ridge regression on [features(target), features(other)]; same interval rule.
- random forest / gradient boosting (scikit-learn, the ``bench`` extra); intervals from quantiles of
  5-fold cross-validated training residuals.
- bayes: :class:`bayes_sched.interference.InterferenceModel` (median and central 90% predictive
  interval).

Prints MAE of normalised speed, 90%-interval coverage and mean interval width per setting and
method.
Run: ``python experiments/bench_interference.py [--splits 5] [--steps 1000] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_val_predict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bayes_sched.interference import (  # noqa: E402
    FitConfig,
    InterferenceModel,
    colocation_observations,
    interval_coverage,
    leave_one_group_out,
    load_gavel_pairs,
    load_gavel_solo_features,
    mean_absolute_error,
    random_pair_splits,
)
from bayes_sched.interference.gavel import job_type_of  # noqa: E402

LEVEL = 0.9


def design(observations: pd.DataFrame, features: pd.DataFrame) -> np.ndarray:
    """Baselines' inputs: the target's solo features next to its neighbour's."""
    return np.hstack(
        [
            features.loc[observations["target"]].to_numpy(),
            features.loc[observations["other"]].to_numpy(),
        ]
    )


def residual_interval(
    prediction: np.ndarray, residuals: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(residuals, [tail, 1 - tail])
    return prediction + low, prediction + high


def run_baselines(train: pd.DataFrame, test: pd.DataFrame, features: pd.DataFrame) -> dict:
    x_train, x_test = design(train, features), design(test, features)
    y_train = train["speed"].to_numpy()
    out = {}
    mean = y_train.mean()
    out["mean"] = (
        np.full(len(test), mean),
        *residual_interval(np.full(len(test), mean), y_train - mean),
    )
    learners = {
        "linear": Ridge(alpha=1.0),
        "random forest": RandomForestRegressor(300, min_samples_leaf=3, random_state=0, n_jobs=1),
        "gradient boosting": HistGradientBoostingRegressor(random_state=0),
    }
    for name, learner in learners.items():
        if name == "linear":
            learner.fit(x_train, y_train)
            residuals = y_train - learner.predict(x_train)
        else:
            residuals = y_train - cross_val_predict(learner, x_train, y_train, cv=5)
            learner.fit(x_train, y_train)
        prediction = learner.predict(x_test)
        out[name] = (prediction, *residual_interval(prediction, residuals))
    return out


def run_bayes(train: pd.DataFrame, test: pd.DataFrame, features: pd.DataFrame, steps: int
              ) -> tuple | None:
    """Median and 90% interval on ``test``, or ``None`` when the fit did not converge (a
    diverged fit's numbers are not results)."""
    model = InterferenceModel.fit_observations(train, features, FitConfig(num_steps=steps))
    if not model.converged:
        return None
    prediction = model.predict_speed(list(test["target"]), list(test["other"]))
    low, high = prediction.interval(LEVEL)
    return prediction.median, low, high


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5, help="random splits (default 5)")
    parser.add_argument("--steps", type=int, default=1000, help="SVI steps per fit (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args()

    observations = colocation_observations(load_gavel_pairs())
    features = load_gavel_solo_features()
    settings = {
        "random 80/20": [
            (f"split {i}", m)
            for i, m in enumerate(random_pair_splits(observations, args.splits, seed=0))
        ],
        "leave one type out": list(leave_one_group_out(observations, job_type_of)),
    }
    rows = []
    diverged: dict[str, int] = {}
    for setting, folds in settings.items():
        collected: dict[str, list] = {}
        started = time.perf_counter()
        for i, (_, test_mask) in enumerate(folds):
            train, test = observations[~test_mask], observations[test_mask]
            results = run_baselines(train, test, features)
            bayes = run_bayes(train, test, features, args.steps)
            if bayes is None:
                diverged[setting] = diverged.get(setting, 0) + 1
                print(f"{setting}: fold {i + 1}: the Bayesian fit did not converge; fold left out "
                      "for every method", file=sys.stderr)
                continue
            results["bayes (this)"] = bayes
            for name, (prediction, low, high) in results.items():
                collected.setdefault(name, []).append(
                    (prediction, low, high, test["speed"].to_numpy())
                )
            print(f"{setting}: fold {i + 1}/{len(folds)} done", file=sys.stderr)
        for name, parts in collected.items():
            prediction, low, high, observed = (np.concatenate(p) for p in zip(*parts, strict=True))
            rows.append(
                {
                    "setting": setting,
                    "method": name,
                    "folds": len(folds) - diverged.get(setting, 0),
                    "n": len(observed),
                    "mae": mean_absolute_error(prediction, observed),
                    "coverage_90": interval_coverage(low, high, observed),
                    "width_90": float(np.mean(high - low)),
                }
            )
        best = min(
            r["mae"] for r in rows if r["setting"] == setting and r["method"] != "bayes (this)"
        )
        for row in rows:
            if row["setting"] == setting:
                row["mae_vs_best_baseline"] = row["mae"] / best
        print(f"{setting}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        frame = pd.DataFrame(rows)
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
