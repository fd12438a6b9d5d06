"""When an iterative fit has converged: one rule for every SVI and gradient fit of the project.

A fit is **converged** when, at its end, both

* its **loss has stopped moving**: the mean loss over the last :attr:`ConvergenceRule.window`
  steps differs from the mean over the window before by at most
  :attr:`ConvergenceRule.loss_tolerance` nats per observation, beyond two standard errors of
  that difference. Means of windows, not single steps: an SVI loss is a one-draw Monte Carlo
  estimate whose step-to-step noise is often larger than the progress of a whole window, and a
  mean over ``W`` steps has ``1/sqrt(W)`` of that noise; what is left of it (the standard error
  of the difference, from the last window's sample variance) is allowed for, so that the rule
  judges the expected loss, not its noise (on 42 observations the standard error is 0.06-0.08
  nats per observation). Nats per observation, not a change relative to the loss itself: the
  loss of a continuous model has no natural zero (a change of units shifts it by a constant), so
  a relative change is arbitrary near zero, while a difference in nats is unit-free and per
  observation compares fits of any size. The allowance for noise has a ceiling: a loss whose
  steps scatter by more than :attr:`ConvergenceRule.max_step_noise` (1 nat per observation;
  standard deviation over the last window) comes from a guide that puts much of its mass where
  the model is far less likely than at its centre (a fit blown up but still finite), and is
  not settled however flat its mean; and
* its **gradient is small**: the root mean square over coordinates of the expected gradient over
  the last window is at most :attr:`ConvergenceRule.gradient_tolerance`, each coordinate scaled
  to be unit-free (see :func:`autonormal_scaled_gradient`: a location's gradient times the
  guide's scale there, a log-scale's as it is). Near the optimum of a locally Gaussian posterior
  the scaled gradient of a location is how many posterior standard deviations it lies from its
  optimum (for a log-scale, about twice the log-ratio to its optimum); at 0.25 a 90% interval
  shifted that far still covers 89%. The expected gradient, not one step's: a one-draw gradient
  is noisy (about 3 per scaled coordinate on the interference model, whatever its distance from
  the optimum), so the window's mean ``m`` is taken and its Monte Carlo noise removed: the mean
  square of ``m`` less the mean over coordinates of each one's sample variance over the window
  divided by ``W`` estimates the mean square of the expected gradient without bias (the steps'
  gradients are nearly uncorrelated: lag-1 autocorrelation 0.03-0.05 on the interference fit).

A fit that did not climb is not thereby converged: a learning rate so small that the fit barely
moves leaves a flat loss and a large gradient; ten steps are too few to tell a window from the
one before (fewer than two windows: not converged). A fit whose loss, gradient or parameters go
non-finite raises :class:`~perfmodel.errors.FitError` at that step (:class:`FitMonitor`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np
import torch

from perfmodel.errors import FitError


@dataclass(frozen=True)
class ConvergenceRule:
    """The settings of the rule (see the module's docstring for why these values)."""

    #: Steps per window: the last window is compared with the one before it.
    window: int = 50
    #: Largest change of the window-mean loss, in nats per observation, of a loss that has
    #: stopped moving.
    loss_tolerance: float = 0.01
    #: Largest root mean square of the window-mean scaled gradient (unit-free).
    gradient_tolerance: float = 0.25
    #: Largest standard deviation of one step's loss over the last window, nats per observation.
    max_step_noise: float = 1.0


#: The rule every fit of the project uses unless told otherwise.
DEFAULT_RULE = ConvergenceRule()


@dataclass(frozen=True)
class Convergence:
    """The verdict on one fit: what was measured at its end and whether that is converged.

    ``loss_change``: last window's mean loss less the window before's, nats per observation
    (NaN with fewer than two windows); ``loss_noise``: its standard error; ``step_noise``: the
    standard deviation of one step's loss over the last window; ``gradient``: root mean square
    of the expected scaled gradient over the last window (NaN where not recorded: then only the
    loss decides).
    """

    fit: str
    steps: int
    window: int
    loss_change: float
    loss_noise: float
    step_noise: float
    gradient: float
    loss_tolerance: float
    gradient_tolerance: float
    max_step_noise: float

    @property
    def converged(self) -> bool:
        return (self.steps >= 2 * self.window and self._loss_settled()
                and not self.gradient > self.gradient_tolerance)

    def _loss_settled(self) -> bool:
        return (abs(self.loss_change) - 2.0 * self.loss_noise <= self.loss_tolerance
                and self.step_noise <= self.max_step_noise)

    def problem(self) -> str | None:
        """One phrase saying why the fit is not converged, or None when it is."""
        if self.converged:
            return None
        if self.steps < 2 * self.window:
            return (f"{self.steps} steps are fewer than two windows of {self.window}, too few to "
                    "tell whether the loss stopped moving")
        problems = []
        if not self._loss_settled():
            if self.step_noise > self.max_step_noise:
                problems.append(f"its loss scatters by {self.step_noise:.3g} nats per observation "
                                f"from step to step (at most {self.max_step_noise:g})")
            else:
                problems.append(f"its loss still moved {self.loss_change:+.3g} +- "
                                f"{self.loss_noise:.2g} nats per observation over the last "
                                f"{self.window} steps (tolerance {self.loss_tolerance:g})")
        if self.gradient > self.gradient_tolerance:
            problems.append(f"its scaled gradient is {self.gradient:.3g} (tolerance "
                            f"{self.gradient_tolerance:g})")
        return " and ".join(problems)

    def message(self) -> str | None:
        """One line for a user: which fit, what is wrong, what to try; None when converged."""
        problem = self.problem()
        if problem is None:
            return None
        return (f"the {self.fit} fit did not converge after {self.steps} steps: {problem}; try "
                "more steps, or a learning rate nearer the default")

    def as_dict(self) -> dict[str, Any]:
        """The fields and :attr:`converged`, for JSON output and saved fits."""
        return {**asdict(self), "converged": self.converged}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Convergence:
        """The inverse of :meth:`as_dict` (``converged`` is recomputed, not read)."""
        return cls(**{k: v for k, v in values.items() if k != "converged"})


def judge(fit: str, losses: Iterable[float], window_gradient: float, num_observations: int,
          rule: ConvergenceRule = DEFAULT_RULE) -> Convergence:
    """The verdict on a fit with loss trace ``losses`` (total loss per step), the root mean square
    of its expected scaled gradient over the last window (:meth:`FitMonitor.window_gradient`) and
    ``num_observations`` observations."""
    trace = np.asarray(list(losses), dtype=float) / max(num_observations, 1)
    w = rule.window
    change = noise = spread = math.nan
    if len(trace) >= 2 * w and w > 1:
        last, before = trace[-w:], trace[-2 * w:-w]
        change = float(last.mean() - before.mean())
        spread = float(last.std(ddof=1))
        # The noise as it is now (the last window's): the window before may still scatter from
        # an earlier, wilder phase, which must not excuse a change.
        noise = spread * math.sqrt(2.0 / w)
    return Convergence(fit, len(trace), w, change, noise, spread, float(window_gradient),
                       rule.loss_tolerance, rule.gradient_tolerance, rule.max_step_noise)


class FitMonitor:
    """Watches an iterative fit step by step: raises :class:`FitError` the step its loss, gradient
    or parameters go non-finite, keeps the loss trace and the scaled gradient summed over the
    last window, and gives the :class:`Convergence` verdict at the end.

    Args:
        fit: what is fitted, as a user knows it (``"interference"``), for messages.
        num_steps: the steps the fit will take (the last window is known in advance).
        num_observations: what the loss is divided by to be per observation.
        rule: the convergence rule.
    """

    def __init__(self, fit: str, num_steps: int, num_observations: int,
                 rule: ConvergenceRule = DEFAULT_RULE) -> None:
        self.fit, self.num_steps, self.num_observations, self.rule = (
            fit, num_steps, num_observations, rule)
        self.losses: list[float] = []
        self._gradient_sum: torch.Tensor | None = None
        self._gradient_squares: torch.Tensor | None = None
        self._gradient_steps = 0

    @property
    def step(self) -> int:
        """Steps recorded so far."""
        return len(self.losses)

    def non_finite(self, what: str) -> FitError:
        """The error for ``what`` (e.g. "loss") turning non-finite at the current step."""
        return FitError(f"the {self.fit} fit diverged: its {what} became non-finite at step "
                        f"{self.step + 1} of {self.num_steps}; try a lower learning rate")

    def record(self, loss: float | torch.Tensor,
               scaled_gradient: Callable[[], torch.Tensor] | None = None) -> None:
        """Record one step's loss (a float or a tensor, detached here) and, in the last window,
        its scaled gradient (called only there: it costs a pass over the parameters)."""
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        if not math.isfinite(value):
            raise self.non_finite("loss")
        if scaled_gradient is not None and self.step >= self.num_steps - self.rule.window:
            gradient = scaled_gradient().detach()
            if not bool(torch.isfinite(gradient).all()):
                raise self.non_finite("gradient")
            gradient = gradient.to(torch.float64)
            if self._gradient_sum is None or self._gradient_squares is None:
                self._gradient_sum, self._gradient_squares = gradient, gradient.pow(2)
            else:
                self._gradient_sum = self._gradient_sum + gradient
                self._gradient_squares = self._gradient_squares + gradient.pow(2)
            self._gradient_steps += 1
        self.losses.append(value)

    def check_parameters(self, parameters: Iterable[torch.Tensor]) -> None:
        """Raise :class:`FitError` if any parameter (after the optimiser's step) is non-finite."""
        if not all(bool(torch.isfinite(p.detach()).all()) for p in parameters):
            self.losses.pop()  # the step that produced them is the one to name
            raise self.non_finite("parameters")

    def window_gradient(self) -> float:
        """Root mean square over coordinates of the expected scaled gradient over the last window,
        its Monte Carlo noise removed (see the module's docstring); NaN where fewer than two
        gradients were recorded."""
        n = self._gradient_steps
        if self._gradient_sum is None or self._gradient_squares is None or n < 2:
            return math.nan
        mean = self._gradient_sum / n
        variance = (self._gradient_squares - n * mean.pow(2)).clamp_min(0.0) / (n - 1)
        return math.sqrt(max(0.0, float(mean.pow(2).mean() - variance.mean() / n)))

    def verdict(self) -> Convergence:
        """The :class:`Convergence` of the fit as recorded."""
        return judge(self.fit, self.losses, self.window_gradient(), self.num_observations,
                     self.rule)


def autonormal_scaled_gradient(values: Mapping[str, torch.Tensor],
                               unconstrained: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The unit-free gradient of a Pyro ``AutoNormal`` guide's parameters, flattened: each
    location's gradient times the guide's scale at that coordinate (how far, in guide standard
    deviations, the location lies from where the loss is flat), each scale's gradient with
    respect to its log.

    ``values``: parameter name to its (constrained) value; ``unconstrained``: name to the leaf
    tensor the optimiser moves, ``.grad`` set by one ``loss_and_grads`` (:func:`svi_fit`). Scales
    are named as their locations with ``locs`` replaced by ``scales`` and are ``softplus`` of
    their leaf (AutoNormal's ``softplus_positive``), so ``d/dlog s = s / sigmoid(raw) d/draw``.
    """
    parts = []
    for name, raw in unconstrained.items():
        if raw.grad is None:
            continue
        gradient = raw.grad
        if ".locs." in name and name.replace(".locs.", ".scales.") in values:
            gradient = gradient * values[name.replace(".locs.", ".scales.")].detach()
        elif ".scales." in name:
            gradient = gradient * values[name].detach() / torch.sigmoid(raw.detach())
        parts.append(gradient.reshape(-1))
    return torch.cat(parts) if parts else torch.zeros(0)


def svi_fit(model: Callable[..., Any], guide: Callable[..., Any], optimiser: Any, loss: Any,
            args: tuple[Any, ...], monitor: FitMonitor,
            scaled_gradient: Callable[[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]],
                                      torch.Tensor] = autonormal_scaled_gradient) -> list[float]:
    """``monitor.num_steps`` steps of stochastic variational inference, as
    ``pyro.infer.SVI.step`` takes them, watched by ``monitor``; returns the loss trace.

    ``optimiser`` is a ``pyro.optim`` optimiser and ``loss`` an ELBO (e.g. ``Trace_ELBO()``).
    A parameter gone non-finite raises :class:`FitError` at its step, also where a distribution
    refuses it first (torch's argument check, a ``ValueError`` naming "Expected parameter").
    """
    from pyro import poutine
    from pyro.infer.util import zero_grads

    for _ in range(monitor.num_steps):
        with poutine.trace(param_only=True) as capture:
            try:
                step_loss = loss.loss_and_grads(model, guide, *args)
            except ValueError as error:
                if not str(error).startswith("Expected parameter"):
                    raise
                raise monitor.non_finite("parameters") from error
        values: dict[str, torch.Tensor] = {name: cast(torch.Tensor, site["value"])
                                           for name, site in capture.trace.nodes.items()}
        params: dict[str, torch.Tensor] = {name: v.unconstrained()  # type: ignore[attr-defined]
                                           for name, v in values.items()}
        monitor.record(step_loss, functools.partial(scaled_gradient, values, params))
        optimiser(params.values())
        zero_grads(params.values())
        monitor.check_parameters(params.values())
    return monitor.losses
