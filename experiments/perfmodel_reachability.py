"""What the shipped profiles allow of issue 18's coverage targets.

1. Per configuration class: rows and placements, and whether any coverage ``k / rows`` lies within
   5 points of 50% and of 90% at all (the 1-GPU class is one placement).
2. Cold start: the median log(step / compute time) of each multi-GPU class (what 1-GPU rows
   cannot show: their sync time is 0) against the mean of the other five models (all a fleet
   prior can know), next to half of 4x the warm 90% width (how far an interval at the width cap
   centred on the fleet mean reaches).
3. Cold start with calibrated intervals: a 1-GPU fit cannot see a model's sync time, so its
   multi-GPU prediction carries the fleet's model-to-model spread ``s_u`` of that class's log
   (step/compute) (the other five's standard deviation times ``sqrt(1 + 1/5)``) besides the
   model's own row noise ``s_e`` (standard deviation of the point fit's log residuals on all rows
   of the class). With the normal interval ``+-1.645 sqrt(s_u^2 + s_e^2)`` around the fleet's
   centre, a model whose offset from it is ``d`` has 90% row coverage
   ``Phi((h - d) / s_e) - Phi((-h - d) / s_e)``: printed at ``d = 0`` (a central model) and at
   its measured ``d``, with the band of ``|d|`` that puts coverage within 85-95% and the chance
   ``P(|d| in band)`` for ``d ~ N(0, s_u^2)`` (a calibrated prior's own view). Where ``s_u`` is
   larger than ``s_e`` a central model is covered above 95%: the per-model band is unreachable
   for any interval calibrated over the fleet.
4. Warm coverage per class is a lottery over few placements: rows of one placement share an
   offset (the point fit's log residuals on all rows, split into a between-placement variance
   ``tau^2`` and a within-placement one ``sigma^2``, one-way random effects). Drawing residuals
   with that structure and the class's real rows per placement, an interval calibrated for a
   single row (``+-z sqrt(tau^2 + sigma^2)``, exact on average) lands with both its 50% and its
   90% coverage within 5 points of target with the printed chance. In-sample residuals shrink
   held-out placements' offsets, so the chance is if anything lower.

Run: ``python experiments/bench_perfmodel.py --skip-cost 2> rows.jsonl`` then
``python experiments/perfmodel_reachability.py rows.jsonl`` (the warm widths come from the
per-model JSON lines the benchmark writes to stderr; without them part 2 prints ``?``).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import scipy.optimize
import scipy.stats

from perfmodel.datasets import POLLUX_MODELS
from perfmodel.profiles import load_pollux_profile
from perfmodel.throughput import (
    CONFIGURATION_CLASSES,
    configuration_class,
    fit_throughput,
    predict_step_time,
)

Z90 = float(scipy.stats.norm.ppf(0.95))


def row_coverage(offset: float, spread: float, noise: float) -> float:
    """90% coverage of rows ``N(offset, noise^2)`` by the interval ``+-Z90 sqrt(spread^2 +
    noise^2)`` around 0."""
    half = Z90 * np.hypot(spread, noise)
    norm = scipy.stats.norm
    return float(norm.cdf((half - offset) / noise) - norm.cdf((-half - offset) / noise))


def placement_variances(residual: np.ndarray, placement: np.ndarray) -> tuple[float, float]:
    """``(tau^2, sigma^2)``: between- and within-placement variance of ``residual`` ``(N,)``
    grouped by ``placement`` ``(N,)`` (one-way random-effects moment estimates; ``tau^2`` >= 0)."""
    labels = np.unique(placement)
    groups = [residual[placement == label] for label in labels]
    sizes = np.array([len(g) for g in groups])
    within = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / max(sizes.sum() - len(
        groups), 1)
    means = np.array([g.mean() for g in groups])
    between = float(means.var(ddof=1)) - within * float(np.mean(1 / sizes)) if len(groups) > 1 \
        else 0.0
    return max(between, 0.0), within


def chance_in_band(sizes: np.ndarray, tau2: float, sigma2: float, draws: int = 20_000,
                   seed: int = 0) -> float:
    """Chance that a calibrated interval's 50% and 90% row coverages both lie within 5 points of
    target, for placements of ``sizes`` rows sharing ``N(0, tau2)`` offsets besides ``N(0,
    sigma2)`` row noise."""
    rng = np.random.default_rng(seed)
    offsets = np.repeat(rng.normal(0.0, np.sqrt(tau2), (draws, len(sizes))), sizes, axis=1)
    residual = offsets + rng.normal(0.0, np.sqrt(sigma2), offsets.shape)
    scale = np.sqrt(tau2 + sigma2)
    hit = np.ones(draws, dtype=bool)
    for level in (0.5, 0.9):
        half = float(scipy.stats.norm.ppf(0.5 + level / 2)) * scale
        hit &= np.abs(np.mean(np.abs(residual) <= half, axis=1) - level) <= 0.05 + 1e-12
    return float(hit.mean())


def band_of_offsets(spread: float, noise: float) -> tuple[float, float]:
    """``(low, high)``: the offsets ``|d|`` whose :func:`row_coverage` lies in [0.85, 0.95]
    (``(nan, nan)`` where none does; coverage falls as ``|d|`` grows)."""
    def at(target: float) -> float:
        if row_coverage(0.0, spread, noise) < target:
            return float("nan")
        return float(scipy.optimize.brentq(lambda d: row_coverage(d, spread, noise) - target,
                                           0.0, 10 * (spread + noise)))
    high = at(0.85)
    low = at(0.95)
    return (0.0 if np.isnan(low) and not np.isnan(high) else low), high


def other_models(ratio: dict[tuple[str, str], float], model: str, name: str) -> np.ndarray:
    """Class ``name``'s median log(step/compute) of the models other than ``model``: all a
    fleet prior can know of ``model`` before it runs on several GPUs."""
    return np.array([ratio[other, name] for other in POLLUX_MODELS if other != model])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="*",
                        help="files of bench_perfmodel.py's JSON lines (its stderr)")
    args = parser.parse_args()
    quality: dict[tuple[str, str, str], dict] = {}
    for path in args.rows:
        try:
            with open(path) as lines:
                text = lines.readlines()
        except OSError as error:
            parser.error(f"{path}: cannot read ({error.strerror})")
        for number, line in enumerate(text, 1):
            if not line.startswith("{"):
                continue
            try:
                rows = json.loads(line)["quality"]
            except (ValueError, KeyError):
                parser.error(f"{path}, line {number}: expected a JSON object with a 'quality' "
                             "list (a line of bench_perfmodel.py's stderr)")
            for row in rows:
                quality[row["model"], row["setting"], row["class"]] = row

    print("Rows and placements per class; is any k/rows within 5 points of 50% and of 90%?")
    print(f"{'model':12s} {'class':7s} {'rows':>5s} {'placements':>10s} {'50% possible':>13s} "
          f"{'90% possible':>13s}")
    ratio, noise_sd = {}, {}
    placement_structure: dict[tuple[str, str], tuple[np.ndarray, float, float]] = {}
    for model in POLLUX_MODELS:
        profile = load_pollux_profile(model)
        classes = configuration_class(profile.num_nodes, profile.num_replicas)
        log_ratio = np.log(profile.step_time / profile.compute_time)
        residual = np.log(profile.step_time / predict_step_time(
            fit_throughput(profile), profile.num_nodes, profile.num_replicas, profile.local_bsz,
            profile.accum_steps))
        for index, name in enumerate(CONFIGURATION_CLASSES):
            rows = classes == index
            n = int(rows.sum())
            possible = np.arange(n + 1) / n
            near = [bool(np.any(np.abs(possible - target) <= 0.05 + 1e-12)) for target in (0.5, 0.9)]
            placements = len(np.unique(profile.placement[rows].astype(str)))
            print(f"{model:12s} {name:7s} {n:5d} {placements:10d} {near[0]!s:>13s} {near[1]!s:>13s}")
            if index:
                ratio[model, name] = float(np.median(log_ratio[rows]))
                noise_sd[model, name] = float(residual[rows].std(ddof=1))
                labels = profile.placement[rows].astype(str)
                _, sizes = np.unique(labels, return_counts=True)
                placement_structure[model, name] = (
                    sizes, *placement_variances(residual[rows], labels))

    print("\nCold start: median log(step/compute) per class against the other five models' mean;"
          "\n'cap' is half of 4x the warm 90% width: an interval at the width cap centred on the "
          "fleet mean reaches that far")
    print(f"{'model':12s} {'class':7s} {'ratio':>6s} {'fleet':>6s} {'dev':>6s} {'fleetSD':>7s} "
          f"{'warm90':>7s} {'cap':>6s} {'reach':>6s}")
    for name in CONFIGURATION_CLASSES[1:]:
        for model in POLLUX_MODELS:
            others = other_models(ratio, model, name)
            deviation = ratio[model, name] - others.mean()
            row = quality.get((model, "warm", name))
            warm = row["width90"] if row else float("nan")
            reach = str(abs(deviation) <= 2 * warm) if row else "?"
            print(f"{model:12s} {name:7s} {ratio[model, name]:6.3f} {others.mean():6.3f} "
                  f"{deviation:6.3f} {others.std(ddof=1):7.3f} {warm:7.3f} {2 * warm:6.3f} "
                  f"{reach:>6s}")

    print("\nCold start with intervals calibrated over the fleet: 90% coverage of a central model "
          "(d = 0) and at the measured offset d;\n|d| band for 85-95% and its chance under the "
          "fleet's spread")
    print(f"{'model':12s} {'class':7s} {'s_u':>6s} {'s_e':>6s} {'cov(0)':>7s} {'d':>7s} "
          f"{'cov(d)':>7s} {'band':>13s} {'P(band)':>8s}")
    for name in CONFIGURATION_CLASSES[1:]:
        for model in POLLUX_MODELS:
            others = other_models(ratio, model, name)
            spread = float(others.std(ddof=1) * np.sqrt(1 + 1 / len(others)))
            noise = noise_sd[model, name]
            offset = ratio[model, name] - float(others.mean())
            low, high = band_of_offsets(spread, noise)
            chance = (float(2 * (scipy.stats.norm.cdf(high / spread)
                                 - scipy.stats.norm.cdf(low / spread)))
                      if not np.isnan(high) else 0.0)
            print(f"{model:12s} {name:7s} {spread:6.3f} {noise:6.3f} "
                  f"{row_coverage(0.0, spread, noise):7.3f} {offset:7.3f} "
                  f"{row_coverage(offset, spread, noise):7.3f} "
                  f"{f'[{low:.2f}, {high:.2f}]':>13s} {chance:8.3f}")

    print("\nWarm coverage over few placements: between/within-placement SD of the point fit's "
          "residuals,\nthe chance a calibrated interval has both 50% and 90% coverage within 5 "
          "points, and the benchmark's warm coverage")
    print(f"{'model':12s} {'class':7s} {'places':>6s} {'tau':>6s} {'sigma':>6s} {'P(both)':>8s} "
          f"{'cov50':>6s} {'cov90':>6s}")
    for name in CONFIGURATION_CLASSES[1:]:
        for model in POLLUX_MODELS:
            sizes, tau2, sigma2 = placement_structure[model, name]
            row = quality.get((model, "warm", name))
            measured = (f"{row['cover50']:6.3f} {row['cover90']:6.3f}" if row
                        else f"{'?':>6s} {'?':>6s}")
            print(f"{model:12s} {name:7s} {len(sizes):6d} {np.sqrt(tau2):6.3f} "
                  f"{np.sqrt(sigma2):6.3f} {chance_in_band(sizes, tau2, sigma2):8.3f} {measured}")


if __name__ == "__main__":
    main()
