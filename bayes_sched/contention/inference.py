"""From a counters dataset to a posterior over hidden loads: data preparation, SVI, NUTS, summaries.

:func:`prepare` checks a counters dataset against the schema and the topology and turns it into
:class:`~bayes_sched.contention.model.ContentionData`; :func:`fit_svi` (vectorised, seeded) or
:func:`run_nuts` (small problems, to check SVI) give posterior draws; :func:`summarise` turns draws
into an :class:`xarray.Dataset` of loads per resource with intervals, ``P(contended)`` and denoised
counters.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyro
import torch
import xarray as xr
from pyro.infer import MCMC, NUTS, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_value
from pyro.optim import ClippedAdam

from bayes_sched.contention.model import (
    BYTES_PER_UNIT,
    HOST_LEVEL_SD,
    NUM_BASIS,
    TRAFFIC_FLOOR,
    ContentionData,
    contention_model,
    cosine_basis,
    initial_locations,
    inverse_softplus,
    latent_loads,
    trend_weight_scales,
)
from bayes_sched.estimation.pyro_scope import private_param_store
from bayes_sched.topology import NodeTopology, TopologyError
from counters import schema
from counters.align import align
from counters.errors import CountersError
from counters.rates import rates
from counters.store import is_store, open_store
from perfmodel.convergence import FitMonitor, svi_fit
from perfmodel.errors import UnreliableFitWarning

#: (variable after counters.rates.rates, units it must have) the model reads.
REQUIRED: dict[str, str] = {
    "gpu_gpm_pcie_tx_rate": "byte s-1",
    "gpu_gpm_pcie_rx_rate": "byte s-1",
    "gpu_utilization": "1",
    "perf_dram_read_rate": "byte s-1",
    "perf_dram_write_rate": "byte s-1",
    "perf_dram_read_running_fraction": "1",
    "perf_dram_write_running_fraction": "1",
    "network_rx_rate": "byte s-1",
    "network_tx_rate": "byte s-1",
}
#: Observed series outside ``[-LOW, HIGH]`` times their scale (a resource's capacity for rates,
#: 1 for fractions) are not physical: refused before the fit, whose Cholesky factors they break.
PLAUSIBLE_LOW = 1.0
PLAUSIBLE_HIGH = 1000.0
#: A resource counts as contended when its load is at least this fraction of capacity ...
SATURATION = 0.9
#: ... for at least this fraction of the window.
SATURATED_SHARE = 0.5


@dataclass(frozen=True)
class PreparedWindow:
    """Model inputs plus the labels needed to map results back to the dataset."""

    data: ContentionData
    time: np.ndarray
    node: np.ndarray
    device: np.ndarray
    topology: NodeTopology


def prepare(
    ds: xr.Dataset,
    topology: NodeTopology,
    where: str = "dataset",
    multi_node: Mapping[str, Sequence[str]] | None = None,
) -> PreparedWindow:
    """Check ``ds`` (a counters dataset, raw counters or rates) and build model inputs.

    ``multi_node`` maps each job spanning several nodes to the names of the nodes it spans: its
    all-reduce traffic is then one latent series appearing on each of their NICs.

    Raises :class:`counters.errors.CountersError` for schema or unit problems and
    :class:`~bayes_sched.topology.TopologyError` when the dataset's GPUs do not match
    the topology.
    """
    schema.validate(ds, where=where, check_monotonic=False)
    rated = rates(ds)
    for name, units in REQUIRED.items():
        if name not in rated:
            raise CountersError(
                f"{where}: variable '{name}' is missing; the contention model needs "
                f"{', '.join(REQUIRED)}"
            )
        if rated[name].attrs.get("units") != units:
            raise CountersError(
                f"{where}: variable '{name}' has units "
                f"{rated[name].attrs.get('units')!r}, expected {units!r}"
            )
    num_devices = rated.sizes.get(schema.DEVICE, 0)
    if num_devices != topology.num_gpus:
        raise TopologyError(
            f"{where}: {num_devices} GPUs per node, but the topology has "
            f"{topology.num_gpus} ({list(topology.gpus_per_switch)} per switch)"
        )

    def tensor(name: str, scale: float = 1.0) -> torch.Tensor:
        array = rated[name].transpose(schema.TIME, schema.NODE, ...).values / scale
        return torch.tensor(array, dtype=torch.float32)

    pcie = tensor("gpu_gpm_pcie_tx_rate", BYTES_PER_UNIT) + tensor(
        "gpu_gpm_pcie_rx_rate", BYTES_PER_UNIT
    )
    dram = tensor("perf_dram_read_rate", BYTES_PER_UNIT) + tensor(
        "perf_dram_write_rate", BYTES_PER_UNIT
    )
    fraction = 0.5 * (
        tensor("perf_dram_read_running_fraction") + tensor("perf_dram_write_running_fraction")
    )
    nic = tensor("network_rx_rate", BYTES_PER_UNIT) + tensor("network_tx_rate", BYTES_PER_UNIT)
    data = ContentionData(
        pcie=pcie,
        util=tensor("gpu_utilization"),
        dram=dram,
        running_fraction=fraction,
        nic=nic,
        membership=torch.tensor(topology.switch_membership(), dtype=torch.float32),
        capacity_switch=topology.pcie_switch_capacity / BYTES_PER_UNIT,
        capacity_dram=topology.dram_capacity / BYTES_PER_UNIT,
        capacity_nic=topology.nic_capacity / BYTES_PER_UNIT,
        spans=_span_matrix(multi_node, rated[schema.NODE].values, where),
    )
    _check_observations(data, rated[schema.TIME].values, where)
    return PreparedWindow(
        data,
        rated[schema.TIME].values,
        rated[schema.NODE].values,
        rated[schema.DEVICE].values,
        topology,
    )


def _check_observations(data: ContentionData, time: np.ndarray, where: str) -> None:
    """Refuse a window with no finite observation at all (the posterior would be the prior's) or
    with values far outside physical ranges, naming the series and the first bad sample."""
    series = {
        "PCIe traffic (gpu_gpm_pcie_tx_rate + gpu_gpm_pcie_rx_rate, GB/s)": (
            data.pcie, data.capacity_switch),
        "gpu_utilization": (data.util, 1.0),
        "DRAM traffic (perf_dram_read_rate + perf_dram_write_rate, GB/s)": (
            data.dram, data.capacity_dram),
        "perf_dram_*_running_fraction": (data.running_fraction, 1.0),
        "network traffic (network_rx_rate + network_tx_rate, GB/s)": (data.nic, data.capacity_nic),
    }
    if not any(bool(torch.isfinite(values).any()) for values, _ in series.values()):
        raise CountersError(
            f"{where}: no finite sample in any counter the contention model reads (every value "
            "is NaN or missing): expected measured counters; nothing to infer from"
        )
    for label, (values, scale) in series.items():
        low, high = -PLAUSIBLE_LOW * scale, PLAUSIBLE_HIGH * scale
        bad = torch.isfinite(values) & ((values < low) | (values > high))
        if bool(bad.any()):
            first = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise CountersError(
                f"{where}: {label} is {float(values[first]):.4g} at time={time[first[0]]}: "
                f"expected values in [{low:g}, {high:g}]"
            )


def _span_matrix(
    multi_node: Mapping[str, Sequence[str]] | None, nodes: np.ndarray, where: str
) -> torch.Tensor | None:
    """``(M, N)`` 0/1 node membership of multi-node jobs, or ``None`` when there are none."""
    if not multi_node:
        return None
    names = [str(n) for n in nodes]
    spans = torch.zeros(len(multi_node), len(names))
    for m, (job, spanned) in enumerate(multi_node.items()):
        if isinstance(spanned, str):
            spanned = [spanned]
        unknown = sorted(set(map(str, spanned)) - set(names))
        if unknown:
            raise TopologyError(
                f"{where}: multi-node job {job!r} spans node {unknown[0]!r}, which has no "
                f"counters here (nodes: {', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
            )
        if len(set(spanned)) < 2:
            raise TopologyError(
                f"{where}: multi-node job {job!r} spans {len(set(spanned))} node(s); expected 2 "
                "or more"
            )
        spans[m, [names.index(str(n)) for n in spanned]] = 1.0
    return spans


def num_observations(data: ContentionData) -> int:
    """Finite samples of every observed series (what the loss is a sum over)."""
    return sum(int(torch.isfinite(series).sum())
               for series in (data.pcie, data.util, data.dram, data.nic))


def _initial_values(data: ContentionData) -> dict[str, torch.Tensor]:
    loc = initial_locations(data)
    num_n = data.shape[1]
    return {
        **loc,
        "weights": torch.zeros(num_n, 8),
        "sigma_pcie": torch.tensor(0.05),
        "sigma_util": torch.tensor(0.03),
        "sigma_mux": torch.tensor(0.3),
        "sigma_nic": torch.tensor(0.03),
        "spread": torch.tensor([0.3, 0.3, 0.3, 0.1]),
    }


@private_param_store
def fit_svi(
    window: PreparedWindow,
    num_steps: int = 1000,
    learning_rate: float = 0.1,
    final_learning_rate: float = 0.01,
    num_samples: int = 200,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """SVI with a mean-field normal guide started at the data; returns ``num_samples`` draws of the
    model's derived loads, each ``(S, ...)``.

    Every site is vectorised over nodes and windows, so one step costs a few tensor operations
    whatever the cluster size. Warns :class:`~perfmodel.errors.UnreliableFitWarning` when the fit
    did not converge (:mod:`perfmodel.convergence`: on a 10-node synthetic window the default
    schedule's loss stops moving after about 600 of its 1,000 steps; 100 steps leave it moving);
    raises :class:`~perfmodel.errors.FitError` when its loss or parameters go non-finite.
    """
    data = window.data
    pyro.set_rng_seed(seed)
    guide = AutoNormal(
        contention_model, init_loc_fn=init_to_value(values=_initial_values(data)), init_scale=0.02
    )
    decay = (final_learning_rate / learning_rate) ** (1.0 / max(num_steps, 1))
    optimiser = ClippedAdam({"lr": learning_rate, "lrd": decay})
    monitor = FitMonitor("contention", num_steps, num_observations(data))
    with pyro.validation_enabled(False):  # argument checks cost a fifth of each step
        svi_fit(contention_model, guide, optimiser, Trace_ELBO(), (data,), monitor)
    if (message := monitor.verdict().message()) is not None:
        warnings.warn(message, UnreliableFitWarning, stacklevel=3)
    generator = torch.Generator().manual_seed(seed)
    latent = {}
    with torch.no_grad():
        for name in (
            "z_x",
            "z_u",
            "z_k",
            "z_h",
            "level",
            "weights",
            "level_x",
            "level_u",
            "level_k",
            *(("z_a", "level_a") if data.num_span_jobs else ()),
        ):
            loc, scale = guide._get_loc_and_scale(name)
            noise = torch.randn((num_samples, *loc.shape), generator=generator)
            latent[name] = loc + scale * noise
        medians = guide.median(data)
        spread = medians["spread"]
        _blind_series_from_prior(data, latent, spread, generator)
        sites = load_sites(data)
        loads = latent_loads(data, **{k: latent[k] for k in sites})
        centre = latent_loads(data, **{k: guide._get_loc_and_scale(k)[0] for k in sites})
        # The CPUs' own DRAM traffic is linear-Gaussian given everything else: its posterior is
        # computed exactly (after linearising the softplus at the fit), because a mean-field
        # guide understates how uncertain a smooth series is between noisy samples.
        other = loads["dram"] - loads["host"]
        loads["host"] = host_posterior(
            data, other, centre["host"], centre["dram"], medians["sigma_mux"], spread[3], generator
        )
        loads["dram"] = loads["host"] + other
        return loads


def host_posterior(
    data: ContentionData,
    other_dram: torch.Tensor,
    host_centre: torch.Tensor,
    dram_centre: torch.Tensor,
    sigma_mux: torch.Tensor,
    spread_host: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """Draws ``(S, T, N)`` of the CPUs' DRAM traffic (GB/s) from its Gaussian posterior.

    The host series ``h = softplus(eta)`` has ``eta = level + B w + e`` (the model's smooth trend
    with independent departures ``e ~ Normal(0, spread_host)``), and each DRAM sample is
    ``h + other + noise`` with the model's multiplexing noise scale. Linearising the softplus
    at ``host_centre`` (``(T, N)``, the fitted host traffic) makes ``eta`` jointly Gaussian with
    the samples; its posterior is exact given each draw of ``other_dram`` (``(S, T, N)``: GPU DMA
    plus NIC traffic), so the trend's own uncertainty between noisy samples is kept. Windows
    without a DRAM sample get the prior's spread.
    """
    num_t, num_n = host_centre.shape
    f64 = torch.float64
    eta_hat = inverse_softplus(host_centre).to(f64).T  # (N, T)
    gain = torch.sigmoid(eta_hat)
    offset = torch.nn.functional.softplus(eta_hat) - gain * eta_hat
    fraction = torch.nan_to_num(data.running_fraction, nan=1.0).clamp(0.02, 1.0).to(f64).T
    noise = float(sigma_mux) * dram_centre.to(f64).T * torch.sqrt((1 - fraction) / fraction)
    noise = noise + TRAFFIC_FLOOR
    observed = torch.isfinite(data.dram).T
    weight = torch.where(observed, gain**2 / noise**2, torch.zeros_like(noise))  # (N, T)
    dram = torch.where(observed, data.dram.T, torch.zeros_like(data.dram.T)).to(f64)
    target = (dram.unsqueeze(0) - other_dram.to(f64).transpose(-1, -2) - offset) / gain
    # Prior of eta over a node's windows: the model's level + cosine trend + departures.
    design = torch.cat(
        [torch.ones(num_t, 1, dtype=f64), cosine_basis(num_t, NUM_BASIS).to(f64)], dim=1
    )
    prior_sd = torch.cat(
        [torch.tensor([HOST_LEVEL_SD], dtype=f64), trend_weight_scales(NUM_BASIS, f64)]
    )
    eye = torch.eye(num_t, dtype=f64)
    prior_cov = (design * prior_sd**2) @ design.T + float(spread_host) ** 2 * eye
    precision = torch.linalg.inv(prior_cov).unsqueeze(0) + torch.diag_embed(weight)
    covariance = torch.linalg.inv(precision)
    covariance = 0.5 * (covariance + covariance.transpose(-1, -2))
    chol = torch.linalg.cholesky(covariance + 1e-9 * eye).to(torch.float32)
    # Per-draw products in float32: the ill-conditioned part (the inverses) is done.
    weighted = (weight.unsqueeze(0) * target).to(torch.float32)
    mean = torch.einsum("nts,kns->ktn", covariance.to(torch.float32), weighted)
    standard = torch.randn((other_dram.shape[0], num_n, num_t), generator=generator)
    eta = mean + torch.einsum("nts,kns->ktn", chol, standard)
    return torch.nn.functional.softplus(eta)


#: The latent sites :func:`latent_loads` takes.
LOAD_SITES: tuple[str, ...] = ("z_x", "z_u", "z_k", "z_h", "level", "weights")


def load_sites(data: ContentionData) -> tuple[str, ...]:
    """:data:`LOAD_SITES` plus the multi-node jobs' all-reduce series where there are any."""
    return LOAD_SITES + (("z_a",) if data.num_span_jobs else ())


def _blind_series_from_prior(
    data: ContentionData,
    latent: dict[str, torch.Tensor],
    spread: torch.Tensor,
    generator: torch.Generator,
) -> None:
    """Replace, in place, the draws of series with no observation at all by prior draws.

    A series nothing was measured of has its prior as posterior (given the learned spreads), but
    a mean-field guide started near the data would keep a narrow, made-up interval for it; drawing
    from the prior keeps the answer honest: wide intervals, not a guess.
    """
    num_samples = latent["z_x"].shape[0]
    num_t = data.shape[0]

    def draw(shape: tuple[int, ...], scale: float | torch.Tensor) -> torch.Tensor:
        return torch.randn((num_samples, *shape), generator=generator) * scale

    def replace(
        site: str, level_site: str, blind: torch.Tensor, level_scale: float, index: int
    ) -> None:
        if not blind.any():
            return
        level = draw(tuple(blind.shape), level_scale)
        series = level.unsqueeze(1) + draw((num_t, *blind.shape), spread[index])
        latent[level_site] = torch.where(blind, level, latent[level_site])
        latent[site] = torch.where(blind, series, latent[site])

    replace("z_x", "level_x", ~torch.isfinite(data.pcie).any(0), 10.0, 0)
    replace("z_u", "level_u", ~torch.isfinite(data.util).any(0), 3.0, 1)
    replace("z_k", "level_k", ~torch.isfinite(data.nic).any(0), 10.0, 2)
    blind_host = ~torch.isfinite(data.dram).any(0)
    if blind_host.any():
        num_n, num_basis = latent["weights"].shape[-2:]
        latent["level"] = torch.where(blind_host, draw((num_n,), HOST_LEVEL_SD), latent["level"])
        latent["weights"] = torch.where(
            blind_host[:, None],
            draw((num_n, num_basis), trend_weight_scales(num_basis)),
            latent["weights"],
        )
        latent["z_h"] = torch.where(blind_host, draw((num_t, num_n), spread[3]), latent["z_h"])


def run_nuts(
    window: PreparedWindow, num_samples: int = 200, warmup_steps: int = 200, seed: int = 0
) -> dict[str, torch.Tensor]:
    """NUTS draws of the derived loads: exact up to MCMC error, for checking SVI on small
    windows."""
    data = window.data
    pyro.set_rng_seed(seed)
    kernel = NUTS(
        contention_model,
        init_strategy=init_to_value(values=_initial_values(data)),
        jit_compile=False,
    )
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True)
    mcmc.run(data)
    samples = mcmc.get_samples()
    with torch.no_grad():
        return latent_loads(data, **{name: samples[name] for name in load_sites(data)})


QUANTILES: tuple[float, ...] = (0.05, 0.5, 0.95)


def resource_utilization(draws: dict[str, torch.Tensor], window: PreparedWindow) -> torch.Tensor:
    """``(S, T, N, R)`` load over capacity of every resource in ``topology.resources()`` order."""
    data = window.data
    return torch.cat(
        [
            draws["switch"] / data.capacity_switch,
            (draws["dram"] / data.capacity_dram).unsqueeze(-1),
            (draws["nic"] / data.capacity_nic).unsqueeze(-1),
            draws["util"],
        ],
        dim=-1,
    )


def summarise(window: PreparedWindow, draws: dict[str, torch.Tensor]) -> xr.Dataset:
    """Posterior summaries as a dataset (quantiles 5/50/95% along ``quantile``).

    Variables: ``utilization`` (quantile, time, node, resource), load over capacity, units "1";
    ``p_contended`` (node, resource), the probability that the resource runs at >= 90% of its
    capacity for at least half the window; ``capacity`` (resource) in byte/s (1 for SMs);
    denoised counters with intervals: ``pcie_rate`` (quantile, time, node, device) and
    ``dram_rate``, ``nic_rate``, ``host_dram_rate`` (quantile, time, node) in byte/s,
    ``gpu_utilization`` (quantile, time, node, device) as a fraction; the raw observations as
    ``raw_pcie_rate``, ``raw_dram_rate``, ``raw_nic_rate``, ``raw_gpu_utilization``.
    """
    topology = window.topology
    resources = topology.resources()
    q = torch.tensor(QUANTILES)
    utilization = resource_utilization(draws, window)
    saturated = (utilization >= SATURATION).float().mean(1) >= SATURATED_SHARE
    coords = {
        "quantile": list(QUANTILES),
        schema.TIME: window.time,
        schema.NODE: window.node,
        schema.DEVICE: window.device,
        "resource": [r[0] for r in resources],
    }

    def quantiles(values: torch.Tensor, scale: float = 1.0) -> np.ndarray:
        return (
            torch.quantile(values.flatten(1), q, dim=0).reshape(len(q), *values.shape[1:]) * scale
        ).numpy()

    per_device = ("quantile", schema.TIME, schema.NODE, schema.DEVICE)
    per_node = ("quantile", schema.TIME, schema.NODE)
    data = window.data
    out = xr.Dataset(
        {
            "utilization": (
                ("quantile", schema.TIME, schema.NODE, "resource"),
                quantiles(utilization),
                {"units": "1", "long_name": "load over capacity"},
            ),
            "p_contended": (
                (schema.NODE, "resource"),
                saturated.float().mean(0).numpy(),
                {"units": "1", "long_name": "P(resource contended)"},
            ),
            "capacity": (
                "resource",
                np.array([r[2] for r in resources]),
                {"units": "byte s-1 (1 for gpu_sm)"},
            ),
            "resource_kind": ("resource", np.array([r[1] for r in resources])),
            "pcie_rate": (
                per_device,
                quantiles(draws["pcie"], BYTES_PER_UNIT),
                {"units": "byte s-1"},
            ),
            "gpu_utilization": (per_device, quantiles(draws["util"]), {"units": "1"}),
            "dram_rate": (
                per_node,
                quantiles(draws["dram"], BYTES_PER_UNIT),
                {"units": "byte s-1"},
            ),
            "nic_rate": (per_node, quantiles(draws["nic"], BYTES_PER_UNIT), {"units": "byte s-1"}),
            "host_dram_rate": (
                per_node,
                quantiles(draws["host"], BYTES_PER_UNIT),
                {
                    "units": "byte s-1",
                    "long_name": "host DRAM traffic of the CPUs (never measured)",
                },
            ),
            "raw_pcie_rate": (
                per_device[1:],
                data.pcie.numpy() * BYTES_PER_UNIT,
                {"units": "byte s-1"},
            ),
            "raw_gpu_utilization": (per_device[1:], data.util.numpy(), {"units": "1"}),
            "raw_dram_rate": (
                per_node[1:],
                data.dram.numpy() * BYTES_PER_UNIT,
                {"units": "byte s-1"},
            ),
            "raw_nic_rate": (
                per_node[1:],
                data.nic.numpy() * BYTES_PER_UNIT,
                {"units": "byte s-1"},
            ),
        },
        coords=coords,
    )
    out.attrs["saturation"] = SATURATION
    out.attrs["saturated_share"] = SATURATED_SHARE
    return out


def bottlenecks(posterior: xr.Dataset, limit: int = 10) -> list[dict[str, object]]:
    """The most likely contended resources, most probable first: one dict per (node, resource)."""
    p = posterior["p_contended"].values
    median = posterior["utilization"].sel(quantile=0.5).mean(schema.TIME).values
    low = posterior["utilization"].sel(quantile=0.05).mean(schema.TIME).values
    high = posterior["utilization"].sel(quantile=0.95).mean(schema.TIME).values
    order = np.lexsort((-median.ravel(), -p.ravel()))[:limit]
    rows = []
    for flat in order:
        n, r = np.unravel_index(flat, p.shape)
        rows.append(
            {
                "node": str(posterior[schema.NODE].values[n]),
                "resource": str(posterior["resource"].values[r]),
                "p_contended": float(p[n, r]),
                "utilization": float(median[n, r]),
                "utilization_lower_90": float(low[n, r]),
                "utilization_upper_90": float(high[n, r]),
            }
        )
    return rows


def most_likely_contended(posterior: xr.Dataset, threshold: float = 0.5) -> dict[str, str]:
    """Per node, the resource with the highest ``P(contended)`` if at least ``threshold``, else
    ``"none"``."""
    p = posterior["p_contended"]
    out = {}
    for n, node in enumerate(posterior[schema.NODE].values):
        best = int(np.argmax(p.values[n]))
        out[str(node)] = (
            str(posterior["resource"].values[best]) if p.values[n, best] >= threshold else "none"
        )
    return out


def open_counters(path: str | Path) -> xr.Dataset:
    """A counters store (one node) or a directory of stores (one per node), as one dataset.

    Several nodes are put on one time grid with :func:`counters.align.align` at the nominal
    interval of the stores (their ``interval_s`` attribute, else the median sampling step).
    """
    root = Path(path)
    if is_store(root):
        return open_store(root, lazy=False)
    if not root.is_dir():
        raise CountersError(f"{root}: no such counters store or directory of stores")
    stores = sorted(p for p in root.iterdir() if p.is_dir() and is_store(p))
    if not stores:
        raise CountersError(f"{root}: neither a counters store nor a directory holding stores")
    datasets = [open_store(s, lazy=False) for s in stores]
    interval = datasets[0].attrs.get("interval_s")
    if interval is None:
        steps = np.diff(schema.time_to_seconds(datasets[0][schema.TIME].values))
        interval = float(np.median(steps)) if steps.size else 1.0
    return align(datasets, float(interval))
