"""The contention network: a Pyro model of hidden resource loads behind noisy counters.

Per node ``n``, GPU ``g`` and time window ``t`` (plates over nodes and windows), the latent true
values are, in GB/s (SM use as a fraction)::

    x[t, n, g]   PCIe traffic of GPU g            = softplus(z_x),   z_x ~ Normal(loc_x, spread_x)
    u[t, n, g]   SM busy fraction of GPU g         = sigmoid(z_u),    z_u ~ Normal(loc_u, spread_u)
    k[t, n]      NIC traffic                       = softplus(z_k),   z_k ~ Normal(loc_k, spread_k)
    h[t, n]      host DRAM traffic of the CPUs     = softplus(level_n + B[t] . w_n + z_h),
                                                     z_h ~ Normal(0, spread_h)

Each series has its own level (``loc_x[n, g]``, ...; broad priors) and a learned spread around it,
so a missing sample is filled in from its series' level, with that series' spread. The CPUs' own
traffic ``h`` is never measured alone; it is smooth in time (a cosine basis ``B`` with
coefficients shrinking with frequency), which lets the model average its noise away.

Architecture invariants from the topology tie the latents together:

- a PCIe switch carries the traffic of the GPUs under it: ``switch[t, n, s] = sum_g M[s, g] x``;
- DRAM carries the CPUs' traffic plus all GPU DMA and NIC traffic: ``dram = h + sum_g x + k``;
- no resource carries more than its capacity: a soft wall (``pyro.factor``) above capacity.

Observation models, one per counter class, noise learned per class (relative noise ``sigma``):

- PCIe rate (tx + rx) ~ Normal(x, sigma_pcie x + floor);
- GPU utilization ~ Normal(u, sigma_util);
- DRAM rate (read + write, multiplexed with running fraction f) ~
  Normal(dram, sigma_mux dram sqrt((1 - f) / f) + floor): noise grows as f falls;
- NIC rate (rx + tx) ~ Normal(k, sigma_nic k + floor).

Missing samples are masked out of the likelihood (``obs_mask``), never imputed as zeros: where a
window has no data the posterior is the prior and its intervals say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from torch.nn.functional import softplus

#: Traffic is modelled in GB/s: O(1) numbers suit the optimiser.
BYTES_PER_UNIT = 1e9
#: Absolute noise floor of the traffic counters, GB/s (a counter reading 0 is not exact).
TRAFFIC_FLOOR = 0.05


@dataclass(frozen=True)
class ContentionData:
    """Tensors the model conditions on; ``T`` windows, ``N`` nodes, ``G`` GPUs per node, ``S``
    switches. NaN entries are missing; each ``*_mask`` is True where the entry is observed.

    Attributes:
        pcie: ``(T, N, G)`` PCIe traffic per GPU, GB/s.
        util: ``(T, N, G)`` GPU utilization, fraction.
        dram: ``(T, N)`` host DRAM traffic (read + write), GB/s.
        running_fraction: ``(T, N)`` perf running fraction of the DRAM counters, in (0, 1].
        nic: ``(T, N)`` NIC traffic (rx + tx), GB/s.
        membership: ``(S, G)`` 0/1, GPUs under each PCIe switch.
        capacity_switch, capacity_dram, capacity_nic: GB/s.
    """

    pcie: torch.Tensor
    util: torch.Tensor
    dram: torch.Tensor
    running_fraction: torch.Tensor
    nic: torch.Tensor
    membership: torch.Tensor
    capacity_switch: float
    capacity_dram: float
    capacity_nic: float
    #: ``(M, N)`` 0/1: node ``n`` is spanned by multi-node job ``m`` (``None``: no such jobs).
    spans: torch.Tensor | None = None

    @property
    def num_span_jobs(self) -> int:
        return 0 if self.spans is None else int(self.spans.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        num_t, num_n, num_g = self.pcie.shape
        return num_t, num_n, num_g


def cosine_basis(num_times: int, num_basis: int) -> torch.Tensor:
    """``(T, B)`` DCT-II basis without the constant term (the level carries it)."""
    t = (torch.arange(num_times, dtype=torch.float32) + 0.5) / num_times
    k = torch.arange(1, num_basis + 1, dtype=torch.float32)
    return torch.cos(np.pi * t[:, None] * k[None, :])


def _masked(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.isfinite(values)
    # Masked entries still enter the density computation; give them a harmless finite value.
    return torch.where(mask, values, torch.ones_like(values)), mask


#: Cosine basis functions of each node's host-traffic trend.
NUM_BASIS = 8
#: Prior standard deviation of a node's host-traffic level (latent units).
HOST_LEVEL_SD = 30.0


def trend_weight_scales(num_basis: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Prior standard deviations ``(B,)`` of the trend's basis weights: ``1/k``, so slow
    components may be large and fast ones small."""
    return 1.0 / torch.arange(1, num_basis + 1, dtype=dtype)


def contention_model(data: ContentionData, num_basis: int = NUM_BASIS) -> dict[str, torch.Tensor]:
    """The generative model, a plain function of data. Returns the true loads (GB/s or fraction).

    Sites: ``z_x`` ``(T, N, G)``, ``z_u`` ``(T, N, G)``, ``z_k`` ``(T, N)``, ``level`` ``(N,)``,
    ``weights`` ``(N, B)`` and the per-class noise scales.
    """
    num_t, num_n, num_g = data.shape
    pcie, pcie_mask = _masked(data.pcie)
    util, util_mask = _masked(data.util)
    dram, dram_mask = _masked(data.dram)
    nic, nic_mask = _masked(data.nic)
    fraction = torch.nan_to_num(data.running_fraction, nan=1.0).clamp(0.02, 1.0)

    sigma_pcie = pyro.sample("sigma_pcie", dist.HalfNormal(0.1))
    sigma_util = pyro.sample("sigma_util", dist.HalfNormal(0.1))
    sigma_mux = pyro.sample("sigma_mux", dist.HalfNormal(0.5))
    sigma_nic = pyro.sample("sigma_nic", dist.HalfNormal(0.1))
    # How far a series strays from its own level from one window to the next (latent space).
    spread = pyro.sample("spread", dist.HalfNormal(torch.ones(4)).to_event(1))
    frequency_scale = trend_weight_scales(num_basis)

    node_plate = pyro.plate("nodes", num_n, dim=-1)
    time_plate = pyro.plate("windows", num_t, dim=-2)
    with node_plate:
        level = pyro.sample("level", dist.Normal(0.0, HOST_LEVEL_SD))
        weights = pyro.sample(
            "weights", dist.Normal(0.0, frequency_scale.expand(num_n, num_basis)).to_event(1)
        )
        level_x = pyro.sample("level_x", dist.Normal(0.0, 10.0).expand([num_n, num_g]).to_event(1))
        level_u = pyro.sample("level_u", dist.Normal(0.0, 3.0).expand([num_n, num_g]).to_event(1))
        level_k = pyro.sample("level_k", dist.Normal(0.0, 10.0))
        with time_plate:
            z_k = pyro.sample("z_k", dist.Normal(level_k, spread[..., 2:3]))
            # The CPUs' traffic departs from its smooth trend by a learned amount per window.
            z_h = pyro.sample("z_h", dist.Normal(0.0, spread[..., 3:4]))
            z_x = pyro.sample("z_x", dist.Normal(level_x, spread[..., 0:1, None]).to_event(1))
            z_u = pyro.sample("z_u", dist.Normal(level_u, spread[..., 1:2, None]).to_event(1))
    z_a = None
    if data.num_span_jobs:
        # A multi-node job's all-reduce bytes cross the NIC of every node it spans: one latent
        # series per job, added to each spanned node's own NIC traffic.
        with pyro.plate("span_jobs", data.num_span_jobs, dim=-1):
            level_a = pyro.sample("level_a", dist.Normal(0.0, 10.0))
            with time_plate:
                z_a = pyro.sample("z_a", dist.Normal(level_a, spread[..., 2:3]))
    loads = latent_loads(data, z_x, z_u, z_k, z_h, level, weights, z_a)
    x, k, dram_true = loads["pcie"], loads["nic"], loads["dram"]

    # Capacities are walls: a load above capacity costs ((excess / 2% of capacity)^2) / 2 nats.
    def wall(load: torch.Tensor, capacity: float) -> torch.Tensor:
        return -0.5 * (torch.relu(load - capacity) / (0.02 * capacity)) ** 2

    pyro.factor("switch_capacity", wall(loads["switch"], data.capacity_switch).sum((-1, -2, -3)))
    pyro.factor("dram_capacity", wall(dram_true, data.capacity_dram).sum((-1, -2)))
    pyro.factor("nic_capacity", wall(k, data.capacity_nic).sum((-1, -2)))

    with node_plate, time_plate:
        pyro.sample(
            "obs_pcie",
            dist.Normal(x, sigma_pcie * x + TRAFFIC_FLOOR).mask(pcie_mask).to_event(1),
            obs=pcie,
        )
        pyro.sample(
            "obs_util",
            dist.Normal(loads["util"], sigma_util + 0.005).mask(util_mask).to_event(1),
            obs=util,
        )
        mux_scale = sigma_mux * dram_true * torch.sqrt((1 - fraction) / fraction)
        pyro.sample(
            "obs_dram",
            dist.Normal(dram_true, mux_scale + TRAFFIC_FLOOR).mask(dram_mask),
            obs=dram,
        )
        pyro.sample(
            "obs_nic", dist.Normal(k, sigma_nic * k + TRAFFIC_FLOOR).mask(nic_mask), obs=nic
        )
    return loads


def latent_loads(
    data: ContentionData,
    z_x: torch.Tensor,
    z_u: torch.Tensor,
    z_k: torch.Tensor,
    z_h: torch.Tensor,
    level: torch.Tensor,
    weights: torch.Tensor,
    z_a: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """True loads from the unconstrained latents; any leading sample dims are carried through.

    Shapes: ``z_x``, ``z_u`` ``(..., T, N, G)``; ``z_k`` ``(..., T, N)``; ``level`` ``(..., N)``;
    ``weights`` ``(..., N, B)``; ``z_h`` ``(..., T, N)``; ``z_a`` ``(..., T, M)``, the all-reduce
    traffic of multi-node jobs (with ``data.spans``). Returns ``pcie``, ``util`` ``(..., T, N, G)``;
    ``nic`` (own plus all-reduce traffic), ``host``, ``dram`` ``(..., T, N)``; ``switch``
    ``(..., T, N, S)``; and with multi-node jobs ``allreduce`` ``(..., T, M)``.
    """
    num_t = z_x.shape[-3]
    basis = cosine_basis(num_t, weights.shape[-1])
    x = softplus(z_x)
    k = softplus(z_k)
    allreduce = None
    if z_a is not None and data.spans is not None:
        allreduce = softplus(z_a)
        k = k + allreduce @ data.spans
    trend = level.unsqueeze(-2) + torch.einsum("tb,...nb->...tn", basis, weights)
    h = softplus(trend + z_h)
    return {
        "pcie": x,
        "util": torch.sigmoid(z_u),
        "nic": k,
        "host": h,
        "dram": h + x.sum(-1) + k,
        "switch": x @ data.membership.transpose(0, 1),
        **({} if allreduce is None else {"allreduce": allreduce}),
    }


def inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    y = y.clamp_min(1e-3)
    return y + torch.log(-torch.expm1(-y))


def _fill(values: torch.Tensor, fallback: float) -> torch.Tensor:
    """NaN -> the mean of the finite entries along time (per series), else ``fallback``."""
    finite = torch.isfinite(values)
    total = torch.where(finite, values, torch.zeros_like(values)).sum(0)
    count = finite.sum(0)
    mean = torch.where(count > 0, total / count.clamp_min(1), torch.full_like(total, fallback))
    return torch.where(finite, values, mean.expand_as(values))


def initial_locations(data: ContentionData) -> dict[str, torch.Tensor]:
    """Data-centred starting points for inference (not priors) of the latent sites.

    Series with no data at all start from a generic value.
    """
    x = _fill(data.pcie, 1.0)
    u = _fill(data.util, 0.5).clamp(0.01, 0.99)
    k = _fill(data.nic, 0.1)
    dram = _fill(data.dram, float(x.sum(-1).mean() + 1.0))
    host = (dram - x.sum(-1) - k).clamp_min(0.5)
    extra: dict[str, torch.Tensor] = {}
    if data.num_span_jobs and data.spans is not None:
        # Start each multi-node job at half the quietest NIC it crosses; the rest stays local.
        spans = data.spans.bool()
        crossed = torch.where(spans.unsqueeze(0), k.unsqueeze(1), torch.tensor(1e9))
        allreduce = 0.5 * crossed.min(-1).values  # (T, M)
        k = (k - allreduce @ data.spans).clamp_min(0.01)
        z_a = inverse_softplus(allreduce)
        extra = {"z_a": z_a, "level_a": z_a.mean(0)}
    z_x, z_u, z_k = inverse_softplus(x), torch.logit(u), inverse_softplus(k)
    return {
        "z_x": z_x,
        "z_u": z_u,
        "z_k": z_k,
        "z_h": torch.zeros_like(z_k),
        "level_x": z_x.mean(0),
        "level_u": z_u.mean(0),
        "level_k": z_k.mean(0),
        "level": inverse_softplus(host.median(0).values),
        **extra,
    }
