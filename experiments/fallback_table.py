"""What the NUTS fallback does to shipped models whose SVI guide fails PSIS (issue 17 item 5).

For each model: the SVI fit alone (``fallback=False``) and the default fit (NUTS replaces SVI's
draws when PSIS k-hat > 0.7), both through the saved-fit cache, so a model the demo has fitted is
read back. Prints k-hat, the method that produced the draws, NUTS's diagnostics, whether the
intervals are trusted, the ratio of 90% interval widths (fallback over SVI; median, min and max
over the seven step-time parameters) and the in-sample 90% predictive coverage of each.

    python experiments/fallback_table.py [MODEL ...] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from perfmodel.profiles import resolve_profile
from perfmodel.report import ModelFit, interval_coverage
from perfmodel.saved_fits import FitCache, default_cache_dir
from perfmodel.throughput import PARAM_NAMES
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.posterior import ThroughputPosterior

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def _widths(posterior: ThroughputPosterior) -> np.ndarray:
    rows = {r["parameter"]: r for r in posterior.parameter_summary()}
    return np.array([float(rows[n]["upper_90"]) - float(rows[n]["lower_90"])
                     for n in PARAM_NAMES])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["ncf", "imagenet", "cifar10"])
    parser.add_argument("--cache-dir", type=Path, default=None)
    add_record_flag(parser)
    args = parser.parse_args()
    cache = FitCache(args.cache_dir or default_cache_dir())
    header = ("model", "k_hat", "method", "div", "ess_bulk", "r_hat", "reliable", "width_med",
              "width_min", "width_max", "cov90_svi", "cov90_after", "seconds")
    print(" | ".join(header))
    rows = []
    for name in args.models:
        profile = resolve_profile(name)
        svi = fit_throughput_posterior(profile, fallback=False, cache=cache)
        after = fit_throughput_posterior(profile, cache=cache)
        d = after.diagnostics
        ratio = _widths(after) / _widths(svi)
        coverage = [float(interval_coverage(ModelFit(name, profile, p, None), (0.9,))[0])
                    for p in (svi, after)]
        cells = (name, f"{svi.diagnostics.pareto_k:.2f}", d.source if d.fallback_from else d.method,
                 str(d.divergences), f"{d.ess_bulk_min:.0f}", f"{d.r_hat_max:.3f}",
                 str(d.reliable), f"{np.median(ratio):.2f}", f"{ratio.min():.2f}",
                 f"{ratio.max():.2f}", f"{coverage[0]:.2f}", f"{coverage[1]:.2f}",
                 f"{d.seconds:.0f}")
        print(" | ".join(cells), flush=True)
        rows.append(dict(zip(header, (name, svi.diagnostics.pareto_k,
                                      d.source if d.fallback_from else d.method, d.divergences,
                                      d.ess_bulk_min, d.r_hat_max, d.reliable,
                                      float(np.median(ratio)), float(ratio.min()),
                                      float(ratio.max()), coverage[0], coverage[1], d.seconds),
                             strict=True)))
    if args.record:
        record_results(__file__, {"SVI alone vs the NUTS fallback": rows})


if __name__ == "__main__":
    main()
