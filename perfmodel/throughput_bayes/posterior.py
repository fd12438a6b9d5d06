"""Posterior draws of the step-time model and its predictive distribution
(:class:`ThroughputPosterior`), saved and read as ArviZ InferenceData."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np
import torch

from perfmodel.profiles import StepTimeProfile
from perfmodel.saved_fits import quiet_arviz
from perfmodel.throughput import (
    PARAM_NAMES,
    PARAM_UNITS,
    SHIFT_NAMES,
    ThroughputParams,
    configuration_class,
    step_time_terms,
)
from perfmodel.throughput_bayes.diagnostics import FitDiagnostics
from perfmodel.throughput_bayes.model import (
    NOISE_NAMES,
    NOISE_UNITS,
    StepTimeData,
    step_noise_scale,
)

if TYPE_CHECKING:
    from arviz import InferenceData


class ThroughputPosterior:
    """Posterior draws of the step-time model and its predictive distribution.

    Attributes:
        samples: dict of site name to a numpy array of shape ``(S,)``.
        theta: the step-time parameters, shape ``(S, 7)`` in ``PARAM_NAMES`` order.
        placement_effects: posterior mean log-offset of each measured placement, per series.
    """

    def __init__(self, samples: dict[str, np.ndarray], data: StepTimeData,
                 diagnostics: FitDiagnostics, point: ThroughputParams) -> None:
        self.samples = samples
        self.theta = np.stack([samples[name] for name in PARAM_NAMES], axis=-1)
        self.diagnostics = diagnostics
        self.point = point
        self.placements = data.placements
        self.placement_effects = data.placement_effects
        self._effects = self._placement_effects(data) if data.placement_effects else {
            "compute": np.zeros(data.num_groups), "step": np.zeros(data.num_groups)}

    def to_inference_data(self) -> InferenceData:
        """The draws as ArviZ InferenceData: a ``posterior`` group (one chain, ``S`` draws per
        site), with the diagnostics, the point fit and whether placement effects were modelled
        as JSON attributes (what :meth:`from_inference_data` needs besides the profile)."""
        import xarray as xr

        with quiet_arviz() as az:
            posterior = xr.Dataset({name: (("chain", "draw"), np.asarray(draws)[None])
                                    for name, draws in self.samples.items()})
            idata = az.InferenceData(posterior=posterior)
        idata.attrs.update({
            "diagnostics": json.dumps(asdict(self.diagnostics)),
            "point_fit": json.dumps(self.point.as_dict()),
            "placement_effects": int(self.placement_effects),
        })
        return idata

    @classmethod
    def from_inference_data(cls, idata: InferenceData, profile: StepTimeProfile
                            ) -> ThroughputPosterior:
        """A posterior saved by :meth:`to_inference_data`, for the profile it was fitted to."""
        samples = {str(name): np.asarray(values).reshape(-1)
                   for name, values in idata["posterior"].data_vars.items()}
        diagnostics = FitDiagnostics(**json.loads(idata.attrs["diagnostics"]))
        point = ThroughputParams(**json.loads(idata.attrs["point_fit"]))
        data = StepTimeData.from_profile(profile, bool(int(idata.attrs["placement_effects"])))
        return cls(samples, data, diagnostics, point)

    def _placement_effects(self, data: StepTimeData) -> dict[str, np.ndarray]:
        # Posterior of a placement's offset u given its rows: normal with mean
        # tau^2 * sum(r) / (sigma^2 + n tau^2); averaged over draws.
        t_c, t_o = (torch.as_tensor(t) for t in self.step_time_terms(
            data.nodes.numpy(), data.replicas.numpy(), data.local_bsz.numpy()))
        count = np.bincount(data.group.numpy(), minlength=data.num_groups)
        effects = {}
        for series, observed, predicted in (("compute", data.log_compute, t_c),
                                            ("step", data.log_step, t_o)):
            residual = (observed - torch.log(predicted)).numpy()            # (S, N)
            total = np.zeros((residual.shape[0], data.num_groups))
            np.add.at(total.T, data.group.numpy(), residual.T)
            classes = np.zeros(data.num_groups, dtype=np.int64)
            classes[data.group.numpy()] = (data.config_class.numpy() if data.config_class is not None
                                           else 0)
            s2 = self.noise_scale(series, classes) ** 2
            t2 = self._noise(f"tau_{series}")[:, None] ** 2
            effects[series] = (t2 * total / (s2 + count * t2)).mean(axis=0)
        return effects

    def noise_scale(self, series: str, classes: np.ndarray) -> np.ndarray:
        """Draws of the noise scale of ``series`` (``"compute"`` or ``"step"``) for rows of the
        given configuration classes ``(N,)``; shape ``(S, N)``."""
        if series == "compute":
            return np.broadcast_to(self.samples["sigma_compute"][:, None],
                                   (self.num_samples, len(classes)))
        return step_noise_scale(self.samples["sigma_step"], self._noise("ratio_within", 1.0),
                                self._noise("ratio_across", 1.0), np.asarray(classes))

    def _noise(self, name: str, default: float = 0.0) -> np.ndarray:
        """Draws of a noise site, shape ``(S,)``; ``default`` for a site left out of the model."""
        return self.samples.get(name, np.full(self.theta.shape[0], default))

    @property
    def draws(self) -> np.ndarray:
        """The step-time parameters and the multi-GPU compute shifts, shape ``(S, 9)`` in
        :data:`~perfmodel.throughput.DRAW_NAMES` order (shifts 0 for a fit saved without them):
        what :func:`~perfmodel.throughput.step_time_terms` and
        :class:`~perfmodel.goodput.GoodputModel` take."""
        return np.column_stack([self.theta, *(self._noise(name) for name in SHIFT_NAMES)])

    def step_time_terms(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                        local_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Draws of ``(T_c, T_o)`` in seconds, each ``(S, N)``, for configurations ``(N,)``, the
        multi-GPU compute shifts included."""
        nodes, replicas, m = (np.asarray(a, np.float64) for a in (num_nodes, num_replicas,
                                                                   local_bsz))
        return step_time_terms(self.draws[:, None, :], nodes, replicas, m)

    @property
    def num_samples(self) -> int:
        return self.theta.shape[0]

    def parameter_summary(self, probability: float = 0.9) -> list[dict[str, float | str]]:
        """Posterior mean and central credible interval of every parameter, with its unit (see
        :data:`~perfmodel.throughput.PARAM_UNITS`, :data:`NOISE_UNITS`), one dict per row."""
        tail = (1 - probability) / 2
        level = f"{100 * probability:g}"  # interval columns are named lower_90/upper_90
        rows: list[dict[str, float | str]] = []
        for name in (*PARAM_NAMES, *SHIFT_NAMES, *NOISE_NAMES):
            if name not in self.samples:
                continue
            draws = self.samples[name]
            rows.append({
                "parameter": name,
                "unit": {**PARAM_UNITS, **NOISE_UNITS}.get(name, "1"),
                "point_fit": getattr(self.point, name, float("nan")),
                "mean": float(draws.mean()),
                f"lower_{level}": float(np.quantile(draws, tail)),
                f"upper_{level}": float(np.quantile(draws, 1 - tail)),
            })
        return rows

    def log_step_time_draws(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                            local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0,
                            placement: Sequence[str] | None = None, seed: int = 0) -> np.ndarray:
        """Posterior predictive draws of log seconds per iteration, shape ``(S, N)``.

        A placement that was measured keeps its learned offset; any other configuration draws a
        fresh placement offset (``tau``) besides the noise (``sigma``) — the honest uncertainty of
        a configuration never measured.
        """
        nodes, replicas, m, s = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, np.float64))
                                                      for a in (num_nodes, num_replicas,
                                                                local_bsz, accum_steps)))
        classes = configuration_class(nodes, replicas)
        t_c, t_o = self.step_time_terms(nodes, replicas, m)
        log_t = np.log(s * t_c + t_o)
        rng = np.random.default_rng(seed)
        sigma = self.noise_scale("step", classes)
        tau = self._noise("tau_step")[:, None]
        offset = tau * rng.standard_normal(log_t.shape)
        if placement is not None:
            index = {label: i for i, label in enumerate(self.placements)}
            for j, label in enumerate(np.broadcast_to(np.asarray(placement, dtype=object),
                                                      nodes.shape)):
                if label in index:
                    offset[:, j] = self._effects["step"][index[label]]
        if "nu" in self.samples:
            standard = rng.standard_t(self.samples["nu"][:, None], log_t.shape)
        else:
            standard = rng.standard_normal(log_t.shape)
        return log_t + offset + sigma * standard

    def predict_step_time(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                          local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0,
                          quantiles: Sequence[float] = (0.05, 0.5, 0.95),
                          placement: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Predictive step time in seconds: ``mean``, ``median`` (the point prediction) and
        ``q<quantile>`` entries, each of shape ``(N,)``."""
        draws = self.log_step_time_draws(num_nodes, num_replicas, local_bsz, accum_steps,
                                         placement)
        result = {"mean": np.exp(draws).mean(axis=0), "median": np.exp(np.median(draws, axis=0))}
        for q in quantiles:
            result[f"q{q:g}"] = np.exp(np.quantile(draws, q, axis=0))
        return result

    def predict_throughput(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                           local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0,
                           quantiles: Sequence[float] = (0.05, 0.5, 0.95),
                           placement: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Predictive throughput in examples/s, as :meth:`predict_step_time` (quantile ``q`` of
        throughput is ``K m (s+1)`` over quantile ``1-q`` of step time)."""
        draws = self.log_step_time_draws(num_nodes, num_replicas, local_bsz, accum_steps,
                                         placement)
        work = np.log(np.asarray(num_replicas) * np.asarray(local_bsz)
                      * (np.asarray(accum_steps) + 1.0))
        log_tp = work - draws
        result = {"mean": np.exp(log_tp).mean(axis=0), "median": np.exp(np.median(log_tp, 0))}
        for q in quantiles:
            result[f"q{q:g}"] = np.exp(np.quantile(log_tp, q, axis=0))
        return result
