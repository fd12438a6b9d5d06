"""Per-job demand and sensitivity: which contended resource slows which job, and by how much.

Given the contention posterior (load over capacity of every resource), a jobs table (``job``,
``node``, ``gpu``, ``solo_step_s``: the job's step time alone, e.g. from a profile) and observed
step
times, the slowdown law is::

    log(step[t, j] / solo_step[j]) ~ Normal(sum_k s[j, k] pressure[t, j, k], sigma)
    pressure[t, j, k] = relu(load/capacity of the job's resource of kind k at t - 0.8) / 0.2

for the resource kinds ``k`` = the job's PCIe switch, the node's DRAM, the node's NIC and its GPU's
SMs. ``s[j, k] ~ HalfNormal(0.5)`` is the job's sensitivity: the log slowdown it suffers when that
resource is saturated. A job whose resources never come near saturation keeps its prior: the data
say nothing about its sensitivity, and its interval shows it.

Demand is what the job draws from its GPU's resources: its GPU's PCIe traffic (byte/s) and SM
fraction, split evenly among the jobs sharing that GPU (counters cannot tell them apart).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch
import xarray as xr
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.optim import ClippedAdam

from bayes_sched.contention.inference import PreparedWindow, resource_utilization
from bayes_sched.contention.model import BYTES_PER_UNIT
from bayes_sched.estimation.pyro_scope import private_param_store
from bayes_sched.topology import RESOURCE_KINDS, TopologyError
from perfmodel import textio
from perfmodel.convergence import FitMonitor, svi_fit
from perfmodel.errors import UnreliableFitWarning

#: Pressure starts at this load over capacity and reaches 1 at full capacity.
PRESSURE_ONSET = 0.8
JOB_COLUMNS: tuple[str, ...] = ("job", "node", "gpu", "solo_step_s")


def sensitivity_model(pressure: torch.Tensor, log_slowdown: torch.Tensor | None) -> None:
    """``pressure`` ``(T, J, K)``; ``log_slowdown`` ``(T, J)`` with NaN where not observed."""
    num_t, num_j, num_k = pressure.shape
    sigma = pyro.sample("sigma", dist.HalfNormal(0.1))
    with pyro.plate("jobs", num_j, dim=-1):
        sensitivity = pyro.sample("sensitivity", dist.HalfNormal(0.5).expand([num_k]).to_event(1))
        mean = (pressure * sensitivity).sum(-1)
        if log_slowdown is None:
            return
        mask = torch.isfinite(log_slowdown)
        with pyro.plate("windows", num_t, dim=-2):
            pyro.sample(
                "log_slowdown",
                dist.Normal(mean, sigma).mask(mask),
                obs=torch.where(mask, log_slowdown, torch.zeros_like(log_slowdown)),
            )


def _job_resources(jobs: pd.DataFrame, window: PreparedWindow) -> tuple[np.ndarray, np.ndarray]:
    """Node index ``(J,)`` and resource indices ``(J, 4)`` (switch, dram, nic, sm) of each job."""
    topology = window.topology
    nodes = {str(n): i for i, n in enumerate(window.node)}
    unknown = sorted(set(jobs["node"].astype(str)) - set(nodes))
    if unknown:
        raise TopologyError(f"jobs table: node {unknown[0]!r} is not in the counters dataset")
    gpu = jobs["gpu"].to_numpy(int)
    if (gpu < 0).any() or (gpu >= topology.num_gpus).any():
        raise TopologyError(f"jobs table: gpu out of range 0..{topology.num_gpus - 1}")
    switches = topology.num_switches
    resources = np.stack(
        [
            topology.switch_of_gpu()[gpu],
            np.full_like(gpu, switches),
            np.full_like(gpu, switches + 1),
            switches + 2 + gpu,
        ],
        axis=1,
    )
    return jobs["node"].astype(str).map(nodes).to_numpy(), resources


@private_param_store
def infer_jobs(
    window: PreparedWindow,
    draws: dict[str, torch.Tensor],
    jobs: pd.DataFrame,
    step_time: xr.DataArray,
    num_steps: int = 300,
    seed: int = 0,
) -> pd.DataFrame:
    """Per-job sensitivity (median and 90% interval per resource kind) and demand.

    ``step_time``: dims ``(time, job)`` in s on the window's time axis (NaN where missing).
    Returns one row per job: ``sensitivity_<kind>`` (log slowdown at saturation) with
    ``_lower_90``/``_upper_90``, ``pcie_demand`` (byte/s) and ``sm_demand`` (fraction), medians over time.
    """
    missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
    if missing:
        raise TopologyError(f"jobs table: missing column(s) {', '.join(missing)}")
    node_index, resource_index = _job_resources(jobs, window)
    utilization = resource_utilization(draws, window).median(0).values  # (T, N, R)
    rows, columns = torch.tensor(node_index)[:, None], torch.tensor(resource_index)
    pressure = torch.relu(utilization[:, rows, columns] - PRESSURE_ONSET)
    pressure = (pressure / (1 - PRESSURE_ONSET)).float()  # (T, J, 4)
    steps = step_time.sel(job=jobs["job"].to_numpy()).transpose("time", "job").values
    log_slowdown = torch.tensor(
        np.log(steps / jobs["solo_step_s"].to_numpy()[None, :]), dtype=torch.float32
    )

    pyro.set_rng_seed(seed)
    guide = AutoNormal(sensitivity_model, init_scale=0.05)
    monitor = FitMonitor("job sensitivity", num_steps, int(torch.isfinite(log_slowdown).sum()))
    svi_fit(sensitivity_model, guide, ClippedAdam({"lr": 0.05, "lrd": 0.1 ** (1 / num_steps)}),
            Trace_ELBO(), (pressure, log_slowdown), monitor)
    if (message := monitor.verdict().message()) is not None:
        warnings.warn(message, UnreliableFitWarning, stacklevel=3)
    quantiles = guide.quantiles([0.05, 0.5, 0.95], pressure, log_slowdown)["sensitivity"]
    out = jobs[["job", "node", "gpu"]].copy()
    kinds = RESOURCE_KINDS
    for k, kind in enumerate(kinds):
        out[f"sensitivity_{kind}"] = quantiles[1][:, k].detach().numpy()
        out[f"sensitivity_{kind}_lower_90"] = quantiles[0][:, k].detach().numpy()
        out[f"sensitivity_{kind}_upper_90"] = quantiles[2][:, k].detach().numpy()
    sharing = jobs.groupby(["node", "gpu"])["job"].transform("count").to_numpy()
    gpu = jobs["gpu"].to_numpy(int)
    pcie = draws["pcie"].median(0).values.median(0).values.numpy()  # (N, G) GB/s
    sm = draws["util"].median(0).values.median(0).values.numpy()
    out["pcie_demand"] = pcie[node_index, gpu] * BYTES_PER_UNIT / sharing
    out["sm_demand"] = sm[node_index, gpu] / sharing
    return out


def read_jobs_csv(path: str) -> pd.DataFrame:
    """Read a jobs table: ``job,node,gpu,solo_step_s`` (solo step time in s, > 0), through the
    validation layer (:mod:`perfmodel.textio`): bad bytes or cells fail naming file, row and
    column."""
    table = textio.read_csv(path, TopologyError)
    columns = textio.parse_cells(table, {
        "job": _name, "node": _name, "gpu": textio.int_parser(0, textio.MAX_GPUS),
        "solo_step_s": textio.float_parser(0.0, textio.MAX_STEP_TIME_S, above_minimum=True),
    }, TopologyError)
    if not table.rows:
        raise TopologyError("no rows: expected one row per job", path)
    return pd.DataFrame({"job": columns["job"], "node": columns["node"],
                         "gpu": np.asarray(columns["gpu"], dtype=np.int64),
                         "solo_step_s": np.asarray(columns["solo_step_s"], dtype=np.float64)})


def _name(text: str) -> str:
    if not text:
        raise ValueError("expected a name")
    return text


def read_step_times_csv(path: str, window: PreparedWindow) -> xr.DataArray:
    """Read step times: a ``time`` column (ISO 8601, UTC) and one column per job (s, empty or NaN
    if none), matched to the window's instants (nearest within half a sampling step). Read through
    the validation layer, like :func:`read_jobs_csv`."""
    table = textio.read_csv(path, TopologyError)
    table.require(["time"], TopologyError)
    if not table.rows:
        raise TopologyError("no rows: expected one row per instant", path)
    frame = pd.DataFrame([list(fields) for _, fields in table.rows], columns=list(table.header))
    times = pd.to_datetime(frame["time"].str.strip(), errors="coerce", format="ISO8601")
    if times.isna().any():
        position = int(np.flatnonzero(times.isna().to_numpy())[0])
        raise TopologyError(f"'{frame['time'].iloc[position]}' is not valid: expected an ISO "
                            "8601 time", path, table.rows[position][0], "time")
    values = frame.drop(columns="time").apply(pd.to_numeric, errors="coerce")
    steps = xr.DataArray(
        values.to_numpy(float),
        dims=("time", "job"),
        coords={"time": times.to_numpy(dtype="datetime64[ns]"),
                "job": values.columns.astype(str)},
    )
    step = np.median(np.diff(window.time)) if len(window.time) > 1 else np.timedelta64(1, "s")
    tolerance: Any = step / 2  # a timedelta64: xarray's stubs list only numbers and strings
    return steps.reindex(time=window.time, method="nearest", tolerance=tolerance)
