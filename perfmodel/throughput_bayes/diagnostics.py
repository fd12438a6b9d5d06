"""How far to trust a posterior (:class:`FitDiagnostics`): what produced its draws, PSIS k-hat
of an SVI guide, NUTS's divergences, ESS and R-hat, SVI's convergence verdict, and the one-line
warning when its intervals are not to be trusted."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from perfmodel.convergence import Convergence

#: Above this PSIS k-hat an SVI guide is not a usable posterior (Vehtari et al., 2015-2024).
PARETO_K_USABLE = 0.7
#: NUTS draws are trusted with at least this bulk ESS and at most this R-hat (Vehtari et al. 2021:
#: ESS above 100 per chain, R-hat near 1; 1.05 rather than 1.01 because one chain is run).
ESS_USABLE = 100
R_HAT_USABLE = 1.05


@dataclass(frozen=True)
class FitDiagnostics:
    """How the posterior was obtained and how far to trust it.

    ``method``: what produced the draws (``"svi"`` or ``"nuts"``); ``fallback_from``: the method
    first tried when its result was not trusted and NUTS replaced it (``"svi"``), else None;
    ``pareto_k``: PSIS k-hat of the SVI guide, adapted as a proposal, against the model (< 0.5
    good, < 0.7 usable; for a fallback, the k-hat that caused it; NaN where not computed);
    ``final_loss``: last ELBO loss per row; ``seconds``: wall time of the whole fit, fallback
    included. NUTS only: ``divergences`` (divergent transitions after warm-up), ``ess_bulk_min``
    (smallest bulk effective sample size over the sites) and ``r_hat_max`` (largest
    rank-normalised split R-hat; infinite where a site's draws never moved), from ArviZ. SVI
    only: ``convergence``, the optimisation's verdict (:meth:`.Convergence.as_dict`, the rule of
    :mod:`perfmodel.convergence`; None for NUTS alone).
    """

    method: str
    num_steps: int
    final_loss: float
    pareto_k: float
    seconds: float
    fallback_from: str | None = None
    divergences: int = 0
    ess_bulk_min: float = float("nan")
    r_hat_max: float = float("nan")
    convergence: dict[str, Any] | None = None

    @property
    def converged(self) -> bool:
        """Whether the SVI optimisation converged (True where there was none: NUTS alone)."""
        return self.convergence is None or Convergence.from_dict(self.convergence).converged

    @property
    def reliable(self) -> bool:
        """Whether the intervals can be trusted: an SVI guide that converged and whose k-hat is
        at most :data:`PARETO_K_USABLE` (NaN, not computed, counts as unreliable), or NUTS draws
        without divergences, with bulk ESS at least :data:`ESS_USABLE` and R-hat at most
        :data:`R_HAT_USABLE` (where computed)."""
        if self.method == "svi":
            return self.converged and self.pareto_k <= PARETO_K_USABLE
        return not (self.divergences > 0 or self.ess_bulk_min < ESS_USABLE
                    or self.r_hat_max > R_HAT_USABLE)

    @property
    def source(self) -> str:
        """One phrase naming what produced the draws, e.g. ``"nuts (fallback: SVI k-hat 1.11)"``."""
        if self.fallback_from is None:
            return self.method
        return (f"{self.method} (fallback: {self.fallback_from.upper()} PSIS k-hat "
                f"{self.pareto_k:.2f} > {PARETO_K_USABLE})")

    def warning(self, model: str) -> str | None:
        """One line saying why ``model``'s intervals are not to be trusted, or None."""
        if self.reliable:
            return None
        if self.method == "svi":
            problems = []
            if math.isnan(self.pareto_k):
                problems.append("PSIS k-hat was not computed (the fit's check was off): how "
                                "well the SVI guide fits the posterior is unknown")
            elif not self.pareto_k <= PARETO_K_USABLE:
                problems.append(f"PSIS k-hat {self.pareto_k:.2f} is above {PARETO_K_USABLE}: the "
                                "SVI guide fits the posterior poorly and its intervals may be too "
                                "narrow; check with --method nuts")
            if self.convergence is not None and not self.converged:
                problems.append(str(Convergence.from_dict(self.convergence).message()))
            return f"{model}: {'; '.join(problems)}"
        problems = []
        if self.divergences > 0:
            problems.append(f"{self.divergences} divergent transitions")
        if self.ess_bulk_min < ESS_USABLE:
            problems.append(f"bulk ESS {self.ess_bulk_min:.0f} < {ESS_USABLE}")
        if self.r_hat_max > R_HAT_USABLE:
            problems.append(f"R-hat {self.r_hat_max:.3f} > {R_HAT_USABLE}")
        return (f"{model}: {self.source} did not mix ({', '.join(problems)}): its intervals may "
                "be wrong")

    def as_dict(self) -> dict[str, Any]:
        """The fields and :attr:`reliable`, for JSON output."""
        return {**asdict(self), "reliable": self.reliable}
