"""A synthetic cluster with hidden contention and known ground truth, emitting counters datasets.

The simulator's truth, kept under its laws: the contention inference (:mod:`bayes_sched.contention`)
must never see it (an import-linter contract), only the counters it emits.

Each node has the layout of a :class:`~bayes_sched.topology.NodeTopology` and runs one
job per GPU (two on one GPU in the shared-GPU scenario). Jobs have hidden demands (byte/s of PCIe, of
host DRAM from their CPU side, of NIC; a fraction of their GPU's SMs). Each node is drawn into one
scenario: nothing contended, or one PCIe switch, the DRAM, the NIC, or one GPU's SMs
over-subscribed.

The true sharing law is deliberately *not* the contention model's: every resource splits its
capacity by max-min fairness (water-filling) over the jobs' offered demands, a job progresses at the
pace of its worst-served resource (``p = min_r granted/demand``), and then uses ``p x demand`` of
every resource. GPU DMA and NIC traffic pass through host DRAM, so the DRAM load includes them.

Counters come out in the :mod:`counters.schema` layout (dims time/node/device, catalog units):

- ``gpu_gpm_pcie_tx_rate``, ``gpu_gpm_pcie_rx_rate`` (byte/s, per GPU): 3% multiplicative noise;
- ``gpu_utilization`` (fraction, per GPU): +-0.02 noise, clipped to [0, 1];
- ``perf_dram_read``, ``perf_dram_write`` (cumulative byte counters) with their
  ``*_running_fraction``: multiplexed, so each interval's estimate has relative noise
  ``mux_noise * sqrt((1 - f) / f)`` for running fraction ``f``;
- ``network_rx``, ``network_tx`` (cumulative byte counters): 1% noise.

Samples go missing (NaN + mask), arrive late (the value is the previous instant's), and each node's
clock is skewed (its sample labelled ``t`` reflects the truth at ``t + skew``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from bayes_sched.topology import NodeTopology
from counters import schema

SCENARIOS: tuple[str, ...] = ("none", "pcie_switch", "dram", "nic", "gpu_sm")
#: Variables the generator emits (before rates), all in the counters catalog.
EMITTED_COUNTERS: tuple[str, ...] = (
    "gpu_gpm_pcie_tx_rate",
    "gpu_gpm_pcie_rx_rate",
    "gpu_utilization",
    "perf_dram_read",
    "perf_dram_write",
    "perf_dram_read_running_fraction",
    "perf_dram_write_running_fraction",
    "network_rx",
    "network_tx",
)


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate. Times in s, fractions in [0, 1]."""

    num_nodes: int = 4
    num_samples: int = 60
    interval_s: float = 1.0
    topology: NodeTopology = field(default_factory=NodeTopology)
    scenarios: tuple[str, ...] = SCENARIOS
    running_fraction: tuple[float, float] = (0.2, 0.5)
    mux_noise: float = 0.25
    missing_fraction: float = 0.03
    late_fraction: float = 0.02
    max_clock_skew_s: float = 0.5
    start_s: float = 1.8e9
    seed: int = 0
    #: Jobs spanning several nodes (data-parallel, synchronous): each one's all-reduce traffic
    #: crosses the NIC of every node it spans, the same bytes on each.
    multi_node_jobs: int = 0
    multi_node_span: int = 2
    #: All-reduce traffic of a multi-node job, per spanned node, as a fraction of NIC capacity.
    multi_node_traffic: tuple[float, float] = (0.3, 0.6)


@dataclass(frozen=True)
class SyntheticCluster:
    """Generated data and its ground truth.

    ``counters``: a counters dataset (raw, as a collector would store it). ``truth``: noise-free
    rates of the same quantities (``*_rate`` for counters, byte/s), ``resource_load`` ``(time, node,
    resource)`` in byte/s (fraction for SMs), ``capacity`` ``(resource)``, ``contended``
    ``(node, resource)`` (offered demand above capacity at some instant). ``jobs``: one row per job
    with its node, GPU, hidden demands and base step time; ``step_time`` ``(time, job)`` in s.
    """

    counters: xr.Dataset
    truth: xr.Dataset
    jobs: pd.DataFrame
    step_time: xr.DataArray
    scenario: dict[str, str]
    topology: NodeTopology
    #: One row per multi-node job: ``job``, ``nodes`` (tuple of node names), ``nic`` (offered
    #: all-reduce traffic per node, byte/s). ``truth["allreduce_rate"]`` ``(time, span_job)``
    #: holds the bytes/s each one moves through each of its nodes' NICs.
    multi_node: pd.DataFrame = field(default_factory=pd.DataFrame)


def max_min_share(demand: np.ndarray, capacity: float) -> np.ndarray:
    """Water-filling: each consumer gets ``min(demand, level)`` with the level filling ``capacity``.

    ``demand`` ``(..., J)`` non-negative; returns the grants, same shape.
    """
    demand = np.asarray(demand, dtype=float)
    if demand.sum(-1).max(initial=0.0) <= capacity:
        return demand.copy()
    ordered = np.sort(demand, axis=-1)
    count = demand.shape[-1]
    # Level at which sum(min(d, level)) == capacity: walk the sorted demands.
    before = np.concatenate(
        [np.zeros(ordered.shape[:-1] + (1,)), np.cumsum(ordered, -1)[..., :-1]], -1
    )
    remaining = count - np.arange(count)
    levels = (capacity - before) / remaining
    fits = levels <= ordered
    first = np.argmax(fits, axis=-1)
    level = np.take_along_axis(levels, first[..., None], -1)
    level = np.where(fits.any(-1, keepdims=True), level, np.inf)
    return np.minimum(demand, level)


def _draw_jobs(topology: NodeTopology, scenario: str, rng: np.random.Generator) -> pd.DataFrame:
    """Jobs of one node: demands in byte/s (SM as a fraction), placed one per GPU (+1 if gpu_sm)."""
    gpus = topology.num_gpus
    cap_switch, cap_dram, cap_nic = (
        topology.pcie_switch_capacity,
        topology.dram_capacity,
        topology.nic_capacity,
    )
    per_switch = max(topology.gpus_per_switch)
    jobs = pd.DataFrame(
        {
            "gpu": np.arange(gpus),
            # Quiet defaults: every resource stays below ~60% of capacity.
            "pcie": rng.uniform(0.15, 0.55, gpus) * cap_switch / per_switch,
            "dram_cpu": rng.uniform(0.2, 0.4, gpus) * cap_dram / (2 * gpus),
            "nic": np.where(rng.random(gpus) < 0.3, rng.uniform(0.1, 0.3, gpus) * cap_nic / 2, 0.0),
            "sm": rng.uniform(0.3, 0.7, gpus),
        }
    )
    if scenario == "pcie_switch":
        switch = int(rng.integers(topology.num_switches))
        on_switch = np.flatnonzero(topology.switch_of_gpu() == switch)
        jobs.loc[on_switch, "pcie"] = rng.uniform(0.75, 0.95, len(on_switch)) * cap_switch
    elif scenario == "dram":
        jobs["dram_cpu"] = rng.uniform(1.3, 1.7, gpus) * cap_dram / gpus
    elif scenario == "nic":
        chosen = rng.choice(gpus, size=3, replace=False)
        jobs.loc[chosen, "nic"] = rng.uniform(0.5, 0.7, 3) * cap_nic
    elif scenario == "gpu_sm":
        host = int(rng.integers(gpus))
        jobs.loc[host, "sm"] = rng.uniform(0.65, 0.9)
        extra = jobs.loc[[host]].assign(
            sm=rng.uniform(0.65, 0.9), pcie=rng.uniform(0.1, 0.3) * cap_switch / per_switch
        )
        jobs = pd.concat([jobs, extra], ignore_index=True)
    jobs["tx_share"] = rng.uniform(0.3, 0.5, len(jobs))
    jobs["base_step_s"] = rng.uniform(0.1, 0.5, len(jobs))
    return jobs


def _node_truth(
    jobs: pd.DataFrame, topology: NodeTopology, times: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """True per-instant usage on one node under the max-min + bottleneck law."""
    num_jobs, num_times = len(jobs), len(times)
    # Demands breathe over time (data-loading phases): +-20%, per job.
    period = rng.uniform(15.0, 40.0, num_jobs)
    phase = rng.uniform(0, 2 * np.pi, num_jobs)
    if "period" in jobs:  # multi-node jobs breathe in step on every node they span
        given = jobs["period"].notna().to_numpy()
        period[given] = jobs["period"].to_numpy(float)[given]
        phase[given] = jobs["phase"].to_numpy(float)[given]
    activity = 1.0 + 0.2 * np.sin(2 * np.pi * times[:, None] / period + phase)  # (T, J)
    gpu = jobs["gpu"].to_numpy()
    switch = topology.switch_of_gpu()[gpu]
    pcie = activity * jobs["pcie"].to_numpy()
    nic = activity * jobs["nic"].to_numpy()
    dram = activity * jobs["dram_cpu"].to_numpy() + pcie + nic  # DMA and NIC traffic hit DRAM
    sm = np.broadcast_to(jobs["sm"].to_numpy(), (num_times, num_jobs)).copy()
    ratio = np.ones((num_times, num_jobs))
    offered: dict[str, np.ndarray] = {}
    for s in range(topology.num_switches):
        members = switch == s
        if members.any():
            grant = max_min_share(pcie[:, members], topology.pcie_switch_capacity)
            ratio[:, members] = np.minimum(
                ratio[:, members], grant / np.maximum(pcie[:, members], 1e-9)
            )
        offered[f"pcie_switch{s}"] = pcie[:, members].sum(-1)
    grant = max_min_share(dram, topology.dram_capacity)
    ratio = np.minimum(ratio, grant / np.maximum(dram, 1e-9))
    offered["dram"] = dram.sum(-1)
    with_nic = nic[0] > 0
    if with_nic.any():
        grant = max_min_share(nic[:, with_nic], topology.nic_capacity)
        ratio[:, with_nic] = np.minimum(ratio[:, with_nic], grant / nic[:, with_nic])
    offered["nic"] = nic.sum(-1)
    for g in range(topology.num_gpus):
        members = gpu == g
        grant = max_min_share(sm[:, members], 1.0)
        ratio[:, members] = np.minimum(ratio[:, members], grant / sm[:, members])
        offered[f"gpu{g}_sm"] = sm[:, members].sum(-1)
    used = {"pcie": ratio * pcie, "nic": ratio * nic, "dram": ratio * dram, "sm": ratio * sm}
    return {"progress": ratio, "offered": offered, **used}


def generate(config: GeneratorConfig | None = None) -> SyntheticCluster:
    """Draw a synthetic cluster window (see the module docstring). Deterministic in
    ``config.seed``."""
    config = config or GeneratorConfig()
    rng = np.random.default_rng(config.seed)
    topology = config.topology
    num_t, num_n, num_g = config.num_samples, config.num_nodes, topology.num_gpus
    labels = np.arange(num_t) * config.interval_s
    nodes = [f"node{n:03d}" for n in range(num_n)]
    resources = topology.resources()

    true_rate = {
        name: np.zeros((num_t, num_n, num_g))
        for name in ("gpu_gpm_pcie_tx_rate", "gpu_gpm_pcie_rx_rate", "gpu_utilization")
    }
    true_rate.update(
        {
            name: np.zeros((num_t, num_n))
            for name in (
                "perf_dram_read_rate",
                "perf_dram_write_rate",
                "network_rx_rate",
                "network_tx_rate",
            )
        }
    )
    load = np.zeros((num_t, num_n, len(resources)))
    contended = np.zeros((num_n, len(resources)), dtype=bool)
    job_tables, steps, scenario = [], [], {}
    skew = rng.uniform(-config.max_clock_skew_s, config.max_clock_skew_s, num_n)
    multi_node = _draw_multi_node_jobs(config, nodes, rng)
    node_jobs, node_truths = [], []
    for n, node in enumerate(nodes):
        scenario[node] = str(rng.choice(config.scenarios))
        jobs = _draw_jobs(topology, scenario[node], rng)
        spanning = multi_node[[node in span for span in multi_node["nodes"]]]
        if len(spanning):
            jobs = pd.concat([jobs, _spanning_rows(spanning, num_g, rng)], ignore_index=True)
        node_jobs.append(jobs)
        node_truths.append(_node_truth(jobs, topology, labels + skew[n], rng))
    allreduce = _couple_multi_node_jobs(multi_node, node_jobs, node_truths, num_t)
    for n, node in enumerate(nodes):
        jobs, truth = node_jobs[n], node_truths[n]
        _node_rates(jobs, truth, topology, n, true_rate, load, contended)
        single = (
            jobs["span_job"].isna().to_numpy() if "span_job" in jobs else np.ones(len(jobs), bool)
        )
        jobs = jobs[single].drop(columns=["span_job", "period", "phase"], errors="ignore")
        jobs.insert(0, "node", node)
        job_tables.append(jobs)
        steps.append(jobs["base_step_s"].to_numpy() / truth["progress"][:, single])
    jobs = pd.concat(job_tables, ignore_index=True)
    jobs.insert(0, "job", [f"job{j:04d}" for j in range(len(jobs))])
    step_time = np.concatenate(steps, axis=1) * rng.lognormal(0.0, 0.02, (num_t, len(jobs)))

    observed = _observe(true_rate, config, rng)
    times = config.start_s + labels
    counters = schema.build(
        times,
        nodes,
        observed,
        device=list(range(num_g)),
        attrs={
            "interval_s": config.interval_s,
            "producer": "bayes_sched.sim.laws.contention_generator",
            "seed": config.seed,
        },
    )
    schema.validate(counters, where="generated counters")
    time_coord = counters[schema.TIME].values
    truth_ds = _truth_dataset(true_rate, load, contended, allreduce, time_coord, nodes, topology,
                              multi_node)
    step = xr.DataArray(
        step_time,
        dims=(schema.TIME, "job"),
        coords={schema.TIME: time_coord, "job": jobs["job"].to_numpy()},
        attrs={"units": "s", "long_name": "job step time"},
    )
    return SyntheticCluster(
        counters,
        truth_ds,
        jobs,
        step,
        scenario,
        topology,
        multi_node.drop(columns=["period", "phase"]),
    )


def _spanning_rows(spanning: pd.DataFrame, num_gpus: int, rng: np.random.Generator
                   ) -> pd.DataFrame:
    """One node's rows of the multi-node jobs ``spanning`` it: each on a GPU drawn from ``rng``,
    its all-reduce through the NIC (and host memory, ~1 byte/s of PCIe), near-zero SM."""
    return pd.DataFrame(
        {
            "gpu": rng.integers(num_gpus, size=len(spanning)),
            "pcie": 1.0,  # byte/s: the all-reduce goes via host memory
            "dram_cpu": 0.0,
            "nic": spanning["nic"].to_numpy(),
            "sm": 1e-3,
            "tx_share": 0.5,
            "base_step_s": 1.0,
            "span_job": spanning["job"].to_numpy(),
            "period": spanning["period"].to_numpy(),
            "phase": spanning["phase"].to_numpy(),
        }
    )


def _node_rates(jobs: pd.DataFrame, truth: dict[str, np.ndarray], topology: NodeTopology, n: int,
                true_rate: dict[str, np.ndarray], load: np.ndarray, contended: np.ndarray
                ) -> None:
    """Write node ``n``'s true counter rates (``true_rate``: per GPU ``(T, N, G)``, per node
    ``(T, N)``), its resources' loads ``load[:, n, :]`` and whether each was ever offered more
    than its capacity ``contended[n, :]``, from its ``jobs`` and their ``truth``."""
    resources = topology.resources()
    gpu = jobs["gpu"].to_numpy()
    share = jobs["tx_share"].to_numpy()
    for g in range(topology.num_gpus):
        on = gpu == g
        true_rate["gpu_gpm_pcie_tx_rate"][:, n, g] = (truth["pcie"][:, on] * share[on]).sum(-1)
        true_rate["gpu_gpm_pcie_rx_rate"][:, n, g] = (
            truth["pcie"][:, on] * (1 - share[on])
        ).sum(-1)
        true_rate["gpu_utilization"][:, n, g] = np.minimum(truth["sm"][:, on].sum(-1), 1.0)
    dram = truth["dram"].sum(-1)
    true_rate["perf_dram_read_rate"][:, n] = 0.6 * dram
    true_rate["perf_dram_write_rate"][:, n] = 0.4 * dram
    nic = truth["nic"].sum(-1)
    true_rate["network_rx_rate"][:, n] = 0.5 * nic
    true_rate["network_tx_rate"][:, n] = 0.5 * nic
    switch = topology.switch_of_gpu()
    for r, (name, kind, capacity) in enumerate(resources):
        if kind == "pcie_switch":
            on_switch = switch[gpu] == int(name.removeprefix("pcie_switch"))
            load[:, n, r] = truth["pcie"][:, on_switch].sum(-1)
        elif kind == "dram":
            load[:, n, r] = dram
        elif kind == "nic":
            load[:, n, r] = nic
        else:
            load[:, n, r] = np.minimum(truth["sm"][:, gpu == int(name[3:-3])].sum(-1), 1.0)
        contended[n, r] = bool((truth["offered"][name] > capacity).any())


def _truth_dataset(true_rate: dict[str, np.ndarray], load: np.ndarray, contended: np.ndarray,
                   allreduce: np.ndarray, time_coord: np.ndarray, nodes: list[str],
                   topology: NodeTopology, multi_node: pd.DataFrame) -> xr.Dataset:
    """The hidden truth of a generated window as a dataset: the true counter rates, each
    resource's load and capacity, which were contended, and the multi-node jobs' all-reduce
    traffic."""
    resources = topology.resources()
    num_g = topology.num_gpus
    truth_ds = xr.Dataset(
        {
            name: (
                (schema.TIME, schema.NODE, schema.DEVICE)
                if v.ndim == 3
                else (schema.TIME, schema.NODE),
                v,
            )
            for name, v in true_rate.items()
        },
        coords={
            schema.TIME: time_coord,
            schema.NODE: nodes,
            schema.DEVICE: np.arange(num_g),
            "resource": [r[0] for r in resources],
        },
    )
    truth_ds["resource_load"] = ((schema.TIME, schema.NODE, "resource"), load)
    truth_ds["capacity"] = ("resource", np.array([r[2] for r in resources]))
    truth_ds["contended"] = ((schema.NODE, "resource"), contended)
    truth_ds["allreduce_rate"] = (
        (schema.TIME, "span_job"),
        allreduce,
        {"units": "byte s-1", "long_name": "all-reduce traffic per spanned node's NIC"},
    )
    return truth_ds.assign_coords(span_job=multi_node["job"].to_numpy().astype(str))


def _draw_multi_node_jobs(
    config: GeneratorConfig, nodes: list[str], rng: np.random.Generator
) -> pd.DataFrame:
    """Multi-node jobs: spanned nodes, offered all-reduce traffic per node, breathing."""
    count = config.multi_node_jobs if len(nodes) >= config.multi_node_span else 0
    spans = [
        tuple(sorted(rng.choice(nodes, size=config.multi_node_span, replace=False)))
        for _ in range(count)
    ]
    return pd.DataFrame(
        {
            "job": [f"span{j:03d}" for j in range(count)],
            "nodes": spans,
            "nic": rng.uniform(*config.multi_node_traffic, count)
            * config.topology.nic_capacity,
            # All-reduce traffic is steady: slower breathing than a single node's jobs.
            "period": rng.uniform(40.0, 80.0, count),
            "phase": rng.uniform(0, 2 * np.pi, count),
        }
    )


def _couple_multi_node_jobs(
    multi_node: pd.DataFrame,
    node_jobs: list[pd.DataFrame],
    node_truths: list[dict[str, np.ndarray]],
    num_t: int,
) -> np.ndarray:
    """A synchronous job moves at its slowest node's pace: its progress on every node is the
    minimum over the nodes it spans, so the same all-reduce bytes cross each of their NICs.

    Updates the node truths in place; returns ``(T, M)`` all-reduce byte/s per job.
    """
    out = np.zeros((num_t, len(multi_node)))
    for m, job in enumerate(multi_node["job"]):
        rows = [
            (n, int(np.flatnonzero(jobs.get("span_job", pd.Series(dtype=str)).to_numpy() == job)[0]))
            for n, jobs in enumerate(node_jobs)
            if "span_job" in jobs and (jobs["span_job"] == job).any()
        ]
        progress = np.min([node_truths[n]["progress"][:, r] for n, r in rows], axis=0)
        for n, r in rows:
            truth = node_truths[n]
            scale = progress / np.maximum(truth["progress"][:, r], 1e-12)
            truth["progress"][:, r] = progress
            for kind in ("nic", "dram", "pcie", "sm"):
                truth[kind][:, r] *= scale
        n0, r0 = rows[0]
        out[:, m] = node_truths[n0]["nic"][:, r0]
    return out


def _observe(
    true_rate: dict[str, np.ndarray], config: GeneratorConfig, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Noisy, multiplexed, late and missing observations; counters become cumulative again."""
    out: dict[str, np.ndarray] = {}
    num_t, num_n = true_rate["perf_dram_read_rate"].shape
    for name in ("gpu_gpm_pcie_tx_rate", "gpu_gpm_pcie_rx_rate"):
        out[name] = true_rate[name] * rng.lognormal(0.0, 0.03, true_rate[name].shape)
    util = true_rate["gpu_utilization"]
    out["gpu_utilization"] = np.clip(util + rng.normal(0.0, 0.02, util.shape), 0.0, 1.0)
    for name in ("perf_dram_read", "perf_dram_write"):
        fraction = rng.uniform(*config.running_fraction, (num_t, num_n))
        relative = config.mux_noise * np.sqrt((1 - fraction) / fraction)
        rate = true_rate[f"{name}_rate"] * (1 + relative * rng.standard_normal((num_t, num_n)))
        out[name] = _cumulate(np.maximum(rate, 0.0), config.interval_s, rng)
        out[f"{name}_running_fraction"] = fraction
    for name in ("network_rx", "network_tx"):
        rate = true_rate[f"{name}_rate"] * rng.lognormal(0.0, 0.01, (num_t, num_n))
        out[name] = _cumulate(rate, config.interval_s, rng)
    for name, values in out.items():
        late = rng.random(values.shape) < config.late_fraction
        late[0] = False
        if not name.startswith(("perf_dram_read", "perf_dram_write", "network")) or name.endswith(
            "fraction"
        ):
            values[late] = np.roll(values, 1, axis=0)[late]  # a stale reading
        values[rng.random(values.shape) < config.missing_fraction] = np.nan
        out[name] = values
    # A missing running fraction makes its counter's sample unusable: blank them together.
    for name in ("perf_dram_read", "perf_dram_write"):
        gone = ~np.isfinite(out[f"{name}_running_fraction"]) | ~np.isfinite(out[name])
        out[name][gone] = np.nan
        out[f"{name}_running_fraction"][gone] = np.nan
    return out


def _cumulate(rate: np.ndarray, interval_s: float, rng: np.random.Generator) -> np.ndarray:
    """Cumulative counter values from per-interval rates, starting at an arbitrary offset."""
    start = rng.uniform(1e9, 1e12, rate.shape[1:])
    return start + np.cumsum(rate * interval_s, axis=0)
