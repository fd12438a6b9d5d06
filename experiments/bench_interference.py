"""Validate the co-location models on Gavel's measured co-locations, side by side with baselines.

Settings (``--settings``, default ``random model gpu batch``): 5-fold cross-validation by pair
(``random``), and leave-one-group-out splits where every pair involving one group is held out --
a cold start from solo features: ``type`` (one of the 26 job types, on all three GPUs),
``model`` (one of the 7 job families, every batch size and GPU), ``gpu`` (one of K80, P100,
V100: every pair measured on it) and ``batch`` (one batch size, e.g. every job at batch size 32;
types without a batch size are never held out). Methods (``--methods``) see the same splits and
the same solo features (of the target job and of its neighbour):

- mean: the training mean speed; interval from training residual quantiles.
- linear: ridge regression on [features(target), features(other)]; same interval rule.
- random forest / gradient boosting (scikit-learn, the ``bench`` extra); intervals from quantiles of
  5-fold cross-validated training residuals.
- bayes: :class:`bayes_sched.interference.InterferenceModel` (median and central 90% predictive
  interval).
- gp: :class:`bayes_sched.interference.gp.ColocationGP` on the solo features (GPU type and log
  batch size among them); gp+family: the same with the job family one-hot beside them.
- gp-censored, gp-censored+family: the same inputs,
  :class:`bayes_sched.interference.gp_censored.CensoredColocationGP`, which reads a recorded
  speed of 1 as "at least 1" (a censored observation) instead of an exact 1, learns each job's
  own effects as target and neighbour, and has one noise level per GPU type (a held-out type's
  drawn from its prior).
- gp-censored-t+family: gp-censored+family with Student-t noise (a scale and degrees of freedom
  per GPU type; :mod:`bayes_sched.interference.likelihoods`).

The batch size reaches every method as ``--batch-features`` says (several run side by side on
the same folds, one row per feature choice and method): ``absolute``, the log batch size;
``family-relative``, the log batch size minus the job family's median over its solo runs (a
held-out family's value comes from its own solo runs); ``both``
(:data:`~bayes_sched.interference.gavel.BATCH_FEATURES`).

Prints MAE of normalised speed, 90%-interval coverage and mean interval width per setting and
method (and, on stderr as each fold ends, its held-out group and each method's MAE on it), the
MAE against the best tree ensemble's, and the coverage on the rows faster than alone
(speed > 1) and on those not slower (speed >= 1): Gavel's normalised speeds stop at 1.000 (a
co-located throughput above the solo one is recorded as the solo one), so no row is above 1 and
the rows at 1 stand for them; every method's predictions and intervals are capped at 1 as the
artifact records them (:data:`~bayes_sched.interference.gavel.RECORDED_SPEED_CAP`). A row
recorded at 1 is censored ("at least 1"): its coverage is the credit of
:func:`~bayes_sched.interference.evaluation.coverage_credits`, the probability that the speed it
ran at lies inside the method's interval given that it was at least 1, from each method's
predictive probability of a speed below 1 (the predictive draws', or for the baselines their
prediction plus a training residual's). Beside it, ``expected_90_ge_1``: the coverage of those
rows that the method's own predictions expect
(:func:`~bayes_sched.interference.evaluation.expected_censored_coverage`), which a calibrated
method realises, and which lies below 90% wherever it predicted the rows that reach 1 to fall
short of 1. The
default methods leave out ``bayes (this)``, whose SVI fit takes about two minutes of CPU per fold
(``--methods`` adds it).
Run: ``python experiments/bench_interference.py [--folds 5] [--steps 2000] [--settings random
model gpu batch type] [--methods gp "random forest"] [--batch-features absolute
family-relative] [--per-group] [--json]``; ``--per-group`` adds a table per fold (the held-out
group of a leave-one-group-out setting), which shows where a setting's coverage is lost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_val_predict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bayes_sched.interference import (  # noqa: E402
    FitConfig,
    InterferenceModel,
    colocation_observations,
    leave_one_group_out,
    load_gavel_pairs,
    load_gavel_solo_features,
    mean_absolute_error,
    pair_folds,
)
from bayes_sched.interference.evaluation import (  # noqa: E402
    coverage_credits,
    expected_censored_coverage,
)
from bayes_sched.interference.gavel import (  # noqa: E402
    BATCH_FEATURES,
    DEFAULT_BATCH_FEATURE,
    RECORDED_SPEED_CAP,
    batch_size_of,
    family_of,
    gpu_of,
    job_type_of,
)
from bayes_sched.interference.gp import ColocationGP  # noqa: E402
from bayes_sched.interference.gp_censored import CensoredColocationGP  # noqa: E402
from bayes_sched.interference.model import InterferenceFitError, SpeedPrediction  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

LEVEL = 0.9
SETTINGS = ("random", "model", "gpu", "batch", "type")


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The central :data:`LEVEL` interval of ``prediction`` plus a training residual, and the
    probability that such a speed is below :data:`RECORDED_SPEED_CAP` (the censored rows'
    coverage needs it: :func:`~bayes_sched.interference.evaluation.coverage_credits`)."""
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(residuals, [tail, 1 - tail])
    below = np.mean(prediction[:, None] + residuals[None, :] < RECORDED_SPEED_CAP, axis=1)
    return prediction + low, prediction + high, below


TREES = ("random forest", "gradient boosting")
METHODS = ("mean", "linear", *TREES, "bayes (this)", "gp", "gp+family", "gp-censored",
           "gp-censored+family", "gp-censored-t+family")
DEFAULT_METHODS = tuple(m for m in METHODS if m != "bayes (this)")


def run_baselines(train: pd.DataFrame, test: pd.DataFrame, features: pd.DataFrame,
                  methods: tuple[str, ...] = METHODS) -> dict:
    """Prediction, 90% interval and probability below the cap of each baseline in ``methods``
    on ``test``, with the CPU seconds its fit took: name -> (prediction, low, high, below,
    seconds)."""
    x_train, x_test = design(train, features), design(test, features)
    y_train = train["speed"].to_numpy()
    out = {}
    mean = y_train.mean()
    if "mean" in methods:
        out["mean"] = (
            np.full(len(test), mean),
            *residual_interval(np.full(len(test), mean), y_train - mean), 0.0,
        )
    learners = {
        "linear": Ridge(alpha=1.0),
        "random forest": RandomForestRegressor(300, min_samples_leaf=3, random_state=0, n_jobs=1,
                                               oob_score=True),
        "gradient boosting": HistGradientBoostingRegressor(random_state=0),
    }
    for name, learner in learners.items():
        if name not in methods:
            continue
        started = time.process_time()
        if name == "linear":
            learner.fit(x_train, y_train)
            residuals = y_train - learner.predict(x_train)
        elif name == "random forest":
            # Out-of-bag predictions: each row predicted by the trees that never saw it, the
            # forest's own held-out residuals (no refits).
            learner.fit(x_train, y_train)
            residuals = y_train - learner.oob_prediction_
        else:
            residuals = y_train - cross_val_predict(learner, x_train, y_train, cv=5)
            learner.fit(x_train, y_train)
        prediction = learner.predict(x_test)
        out[name] = (prediction, *residual_interval(prediction, residuals),
                     time.process_time() - started)
    return out


def summary_of(prediction: SpeedPrediction) -> tuple[np.ndarray, ...]:
    """Median, central :data:`LEVEL` interval and probability below the cap of predictive
    draws."""
    low, high = prediction.interval(LEVEL)
    below = np.mean(prediction.samples < RECORDED_SPEED_CAP, axis=0)
    return prediction.median, low, high, below


def run_bayes(train: pd.DataFrame, test: pd.DataFrame, features: pd.DataFrame, steps: int
              ) -> tuple | None:
    """Median, 90% interval and probability below the cap on ``test``, or ``None`` when the
    fit did not converge (a diverged fit's numbers are not results)."""
    model = InterferenceModel.fit_observations(train, features, FitConfig(num_steps=steps))
    if not model.converged:
        return None
    return summary_of(model.predict_speed(list(test["target"]), list(test["other"])))


def run_gp(train: pd.DataFrame, test: pd.DataFrame, features: pd.DataFrame,
           censored: bool = False, student_t: bool = False) -> tuple | None:
    """Median, 90% interval and probability below the cap of the GP co-location model on
    ``test``: the Gaussian one, or with ``censored`` the one that reads a recorded speed of 1
    as "at least 1" (a noise level per GPU type; with ``student_t``, Student-t noise);
    ``None`` where the fit failed (:class:`InterferenceFitError`)."""
    try:
        model = (CensoredColocationGP.fit(train, features, cap=RECORDED_SPEED_CAP,
                                          noise_group=gpu_of, student_t=student_t) if censored
                 else ColocationGP.fit(train, features))
    except InterferenceFitError as error:
        print(f"a GP fit failed ({error}); fold left out for every method", file=sys.stderr)
        return None
    return summary_of(model.predict_speed(list(test["target"]), list(test["other"])))


def with_family(features: pd.DataFrame) -> pd.DataFrame:
    """``features`` with one 0/1 column per job family (``family=<name>``)."""
    families = pd.Series([family_of(str(job)) for job in features.index], index=features.index)
    onehot = pd.get_dummies(families, prefix="family", prefix_sep="=").astype(float)
    return pd.concat([features, onehot], axis=1)


def settings_of(observations: pd.DataFrame, names: list[str], folds: int,
                only: list[str] | None = None) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Test masks per setting name (see the module docstring); with ``only``, the
    leave-one-group-out settings keep just the folds whose held-out group is listed."""
    groups = {"type": job_type_of, "model": family_of, "gpu": gpu_of, "batch": batch_size_of}
    settings: dict[str, list[tuple[str, np.ndarray]]] = {}
    for name in names:
        if name == "random":
            settings[f"random {folds}-fold"] = [
                (f"fold {i}", m) for i, m in enumerate(pair_folds(observations, folds, seed=0))]
        else:
            label = {"gpu": "GPU type", "batch": "batch size"}.get(name, name)
            settings[f"leave one {label} out"] = [
                (group, mask) for group, mask in leave_one_group_out(observations, groups[name])
                if group != "" and (only is None or group in only)]
    return settings


def fold_results(train: pd.DataFrame, test: pd.DataFrame, features: pd.DataFrame,
                 methods: tuple[str, ...], steps: int) -> dict | None:
    """name -> (prediction, low, high, below, CPU seconds) of every method on one fold
    (``below``: the probability of a speed below the cap); ``None``
    where the Bayesian fit did not converge or a GP fit failed (the fold is then left out for
    every method)."""
    results = run_baselines(train, test, features, methods)
    fits = {"bayes (this)": lambda: run_bayes(train, test, features, steps),
            "gp": lambda: run_gp(train, test, features),
            "gp+family": lambda: run_gp(train, test, with_family(features)),
            "gp-censored": lambda: run_gp(train, test, features, censored=True),
            "gp-censored+family": lambda: run_gp(train, test, with_family(features),
                                                 censored=True),
            "gp-censored-t+family": lambda: run_gp(train, test, with_family(features),
                                                   censored=True, student_t=True)}
    for name, fit in fits.items():
        if name in methods:
            started = time.process_time()
            result = fit()
            if result is None:
                return None
            results[name] = (*result, time.process_time() - started)
    # What the artifact records: every method's speeds capped where the artifact caps them.
    return {name: (*(np.minimum(v, RECORDED_SPEED_CAP) for v in result[:3]), *result[3:])
            for name, result in results.items()}


def summarise(setting: str, batch_feature: str, collected: dict[str, list]) -> list[dict]:
    """One row per method of a setting from its folds' (prediction, low, high, below,
    seconds, observed), with the MAE against the best tree ensemble's on the same features.
    Coverage counts a record at the cap as censored
    (:func:`~bayes_sched.interference.evaluation.coverage_credits`)."""
    rows: list[dict[str, Any]] = []
    for name, parts in collected.items():
        prediction, low, high, below, _, observed = (
            np.concatenate([np.atleast_1d(v) for v in p]) for p in zip(*parts, strict=True))
        unslowed, faster = observed >= 1.0, observed > 1.0
        credit = coverage_credits(low, high, observed, RECORDED_SPEED_CAP, below, LEVEL)
        rows.append({
            "setting": setting, "batch_feature": batch_feature, "method": name,
            "folds": len(parts), "n": len(observed),
            "mae": mean_absolute_error(prediction, observed),
            "coverage_90": float(credit.mean()),
            "width_90": float(np.mean(high - low)),
            "n_speed_gt_1": int(faster.sum()),
            "coverage_90_gt_1": float(credit[faster].mean()) if faster.any() else float("nan"),
            "n_speed_ge_1": int(unslowed.sum()),
            "coverage_90_ge_1": float(credit[unslowed].mean()) if unslowed.any()
            else float("nan"),
            # what the method's own predictions expect of that coverage (calibrated: equal)
            "expected_90_ge_1": expected_censored_coverage(below, LEVEL),
            "cpu_s": float(sum(part[4] for part in parts)),
        })
    trees = [r["mae"] for r in rows if r["method"] in TREES]
    best = min(trees) if trees else float("nan")
    for row in rows:
        row["mae_vs_best_tree"] = row["mae"] / best
    return rows


def against_any_tree(rows: list[dict]) -> None:
    """Add ``mae_vs_any_tree``: each row's MAE against the best tree ensemble's of its setting
    over every batch feature run (the strictest reference)."""
    for row in rows:
        trees = [r["mae"] for r in rows
                 if r["setting"] == row["setting"] and r["method"] in TREES]
        row["mae_vs_any_tree"] = row["mae"] / min(trees) if trees else float("nan")


def held_out_speeds(setting: str, folds: list[tuple[str, np.ndarray]],
                    observations: pd.DataFrame) -> list[dict]:
    """What each fold asks a method to reach: per held-out group, the normalised speeds of its
    rows (mean, standard deviation, share recorded at the cap of 1) beside those of the rows
    trained on. A held-out group whose speeds spread wider, or reach the cap where the
    training rows never do, is outside what its training rows show (a method calibrated on
    them has no data from which to widen its intervals there)."""
    speeds = observations["speed"].to_numpy()

    def described(values: np.ndarray, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}mean_speed": float(values.mean()),
                f"{prefix}sd_speed": float(values.std()),
                f"{prefix}at_cap": float(np.mean(values >= RECORDED_SPEED_CAP))}

    return [{"setting": setting, "group": group, "rows": int(test_mask.sum()),
             **described(speeds[test_mask]), **described(speeds[~test_mask], "train_")}
            for group, test_mask in folds]


def run_setting(setting: str, folds: list[tuple[str, np.ndarray]],
                observations: pd.DataFrame, features: dict[str, pd.DataFrame],
                args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """Every method on every fold of one setting, once per batch feature in ``features``
    (fold progress on stderr); its summary rows, and the same per fold (``group``: the
    held-out group, or the random fold's number)."""
    collected: dict[str, dict[str, list]] = {b: {} for b in features}
    per_fold: list[dict] = []
    for i, (group, test_mask) in enumerate(folds):
        train, test = observations[~test_mask], observations[test_mask]
        for batch_feature, table in features.items():
            results = fold_results(train, test, table, tuple(args.methods), args.steps)
            if results is None:
                print(f"{setting} ({batch_feature}): fold {i + 1} ({group}): a fit failed "
                      "or did not converge; fold left out for every method", file=sys.stderr)
                continue
            fold = {name: [(*result, test["speed"].to_numpy())]
                    for name, result in results.items()}
            for name, parts in fold.items():
                collected[batch_feature].setdefault(name, []).extend(parts)
            per_fold += [{"group": group, **row}
                         for row in summarise(setting, batch_feature, fold)]
            maes = ", ".join(f"{name} {mean_absolute_error(r[0], test['speed']):.4f}"
                             for name, r in results.items())
            print(f"{setting} ({batch_feature}): fold {i + 1}/{len(folds)} ({group}, "
                  f"{len(test)} rows) done; MAE {maes}", file=sys.stderr)
    return ([row for b, parts in collected.items() for row in summarise(setting, b, parts)],
            per_fold)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5, help="random folds (default 5)")
    parser.add_argument("--steps", type=int, default=2000, help="SVI steps per fit of "
                        "'bayes (this)' (default 2000)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON (with "
                        "--per-group, both tables by title)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS[:4]), choices=SETTINGS,
                        help="splits to run (default random model gpu batch)")
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=METHODS,
                        help="methods to run (default all but 'bayes (this)')")
    parser.add_argument("--batch-features", nargs="+", default=[DEFAULT_BATCH_FEATURE],
                        choices=BATCH_FEATURES, help="how the batch size enters the solo "
                        f"features; several run side by side (default {DEFAULT_BATCH_FEATURE})")
    parser.add_argument("--groups", nargs="+", default=None, help="leave-one-group-out "
                        "settings run only these held-out groups (e.g. --settings batch "
                        "--groups 16 32: a long setting in pieces; default every group)")
    parser.add_argument("--per-group", action="store_true", help="also a table per fold "
                        "(held-out group): where a setting's coverage is lost; and one of "
                        "each held-out group's speeds beside the training rows'")
    add_record_flag(parser)
    args = parser.parse_args()
    # Two threads on a shared two-core machine thrash: one is several times faster per fit.
    torch.set_num_threads(1)
    cpu_started = time.process_time()

    observations = colocation_observations(load_gavel_pairs())
    features = {b: load_gavel_solo_features(batch_feature=b)
                for b in dict.fromkeys(args.batch_features)}
    settings = settings_of(observations, args.settings, args.folds, args.groups)
    rows, group_rows, speed_rows = [], [], []
    for setting, folds in settings.items():
        started = time.perf_counter()
        done, per_fold = run_setting(setting, folds, observations, features, args)
        rows += done
        if args.per_group:
            group_rows += per_fold
            speed_rows += held_out_speeds(setting, folds, observations)
        print(pd.DataFrame(done).to_string(index=False, float_format=lambda v: f"{v:.4f}"),
              file=sys.stderr)
        print(f"{setting}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    against_any_tree(rows)
    print(f"CPU time {time.process_time() - cpu_started:.0f} s; load average "
          f"{Path('/proc/loadavg').read_text().split()[:3]}", file=sys.stderr)
    tables = {"co-location prediction per setting and method": rows,
              "co-location prediction per held-out group": group_rows,
              "speeds per held-out group, beside the training rows'": speed_rows}
    if args.json:
        print(json.dumps(rows if not group_rows else tables, indent=2))
    else:
        for table in tables.values():
            if table:
                print(pd.DataFrame(table).to_string(index=False,
                                                    float_format=lambda v: f"{v:.4f}"))
    if args.record:
        record_results(__file__, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
