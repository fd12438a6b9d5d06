"""The contention law: the contention generator's max-min law on the simulated cluster.

Every job offers hidden demands on its nodes' shared resources (each PCIe switch, host DRAM, the
NIC); each resource splits its capacity by max-min fairness over the jobs' offered demands
(:func:`~bayes_sched.sim.laws.contention_generator.max_min_share`), and a job progresses at the
pace of its worst-served resource on any of its nodes. Demands are derived from what the application is (its
measured step and sync times, sample size and decode cost) -- see :func:`job_demands`. The law
emits the per-node counters a real cluster would collect (:meth:`ContentionLaw.counters`, in the
:mod:`counters.schema` layout), the only part of it a policy sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import xarray as xr

from bayes_sched.cluster import placement_of
from bayes_sched.cluster_spec import DEFAULT_TOPOLOGY, ClusterSpec
from bayes_sched.errors import InputError
from bayes_sched.sim.laws.base import RunningJob
from bayes_sched.sim.laws.contention_generator import max_min_share
from bayes_sched.sim.physics import APPLICATION_NAMES, get_application
from bayes_sched.topology import NodeTopology
from counters import schema

#: The artifact's node (AWS g4dn.12xlarge: 4 T4 GPUs on PCIe 3.0, two per switch, one socket,
#: 50 Gbit/s network), the cluster specs' default (one definition:
#: :data:`bayes_sched.cluster_spec.DEFAULT_TOPOLOGY`).
ARTIFACT_NODE = DEFAULT_TOPOLOGY


@dataclass(frozen=True)
class ApplicationTraits:
    """What an application moves: bytes of one input sample as it reaches the GPU, and host DRAM
    bytes touched per sample byte by the input pipeline (read, decode, augment, copy)."""

    sample_bytes: float
    decode_amplification: float


#: Input sizes of the artifact's models (fp32/uint8 tensors as fed to the GPU): ImageNet 224x224x3
#: uint8 JPEG-decoded; CIFAR-10 32x32x3; SQuAD 384 tokens x 3 int64 inputs; LibriSpeech ~500 frames
#: x 161 fp32 spectrogram bins; COCO 416x416x3 fp32; MovieLens (user, item, label) int64.
APPLICATION_TRAITS: Mapping[str, ApplicationTraits] = {
    "imagenet": ApplicationTraits(224 * 224 * 3, 8.0),
    "cifar10": ApplicationTraits(32 * 32 * 3, 4.0),
    "bert": ApplicationTraits(384 * 3 * 8, 2.0),
    "deepspeech2": ApplicationTraits(500 * 161 * 4, 4.0),
    "yolov3": ApplicationTraits(416 * 416 * 3 * 4, 6.0),
    "ncf": ApplicationTraits(3 * 8, 2.0),
}

#: Resources of one node in the order :func:`job_demands` returns them.
NODE_RESOURCES: tuple[str, ...] = ("pcie_switch", "dram", "nic")


def job_demands(application: str, placement: tuple[int, ...], local_bsz: int,
                topology: NodeTopology) -> tuple[float, float, float]:
    """Offered demand of a job on the nodes it uses: ``(pcie, dram, nic)`` byte/s, PCIe and DRAM
    per GPU it has on a node, NIC per node.

    From the application's measured step time ``t`` and sync time ``s`` at this placement:

    * input: ``sample_bytes x local_bsz / t`` per GPU crosses PCIe and ``decode_amplification``
      times that is read and written in host DRAM;
    * gradient synchronisation is bandwidth-bound: a distributed job keeps each of its nodes' NIC
      busy for the fraction ``s / t`` of its steps (offered ``s/t x NIC capacity``), and a
      multi-GPU job keeps its GPUs' PCIe links busy for ``s / t`` (each GPU under a switch offering
      its share of the switch);
    * GPU DMA traffic passes through host DRAM (the generator's rule; so does NIC traffic, which
      the caller adds per node).

    A job alone never exceeds a capacity (its measured step time already includes its own
    contention): the caller caps each job's total per resource at the capacity.
    """
    app = get_application(application)
    traits = APPLICATION_TRAITS[application]
    step, sync = app.step_time(placement, local_bsz)
    share = min(max(sync / step, 0.0), 1.0) if step > 0 else 0.0
    input_rate = traits.sample_bytes * local_bsz / step if step > 0 else 0.0
    per_switch = max(topology.gpus_per_switch)
    pcie = input_rate + (share * topology.pcie_switch_capacity / per_switch
                         if sum(placement) > 1 else 0.0)
    nic = share * topology.nic_capacity if len(placement) > 1 else 0.0
    dram = traits.decode_amplification * input_rate + pcie
    return pcie, dram, nic


@dataclass
class ContentionLaw:
    """The generator's law on the simulated cluster (see the module docstring).

    Args:
        topology: each node's layout and capacities (default: the artifact's g4dn.12xlarge); it
            must be every node's topology in the cluster it runs on.
        demand_spread: each application's demands are multiplied by a seeded log-normal factor of
            this spread per resource (hidden variation a policy has to learn, not read off).
        seed: seeds those factors.
        samples_per_round: counter samples :meth:`counters` emits per round.
        noise: relative noise of emitted counter samples.
        missing_fraction: fraction of emitted samples lost (NaN).
    """

    topology: NodeTopology = ARTIFACT_NODE
    demand_spread: float = 0.2
    seed: int = 0
    samples_per_round: int = 6
    noise: float = 0.05
    missing_fraction: float = 0.03
    name: str = field(default="contention", init=False)
    _factors: dict[str, np.ndarray] = field(default_factory=dict, repr=False, init=False)
    _last_usage: dict[str, np.ndarray] = field(default_factory=dict, repr=False, init=False)
    _totals: dict[str, np.ndarray] = field(default_factory=dict, repr=False, init=False)

    def check_cluster(self, cluster: ClusterSpec) -> None:
        """Every node must have the law's topology (it computes on its GPU slots and switches)."""
        for index, node in enumerate(cluster.nodes):
            if node.topology != self.topology:
                raise InputError(
                    f"hidden law 'contention': node {index} ({node.num_gpus} {node.gpu_type} "
                    f"GPUs, switches {list(node.topology.gpus_per_switch)}) does not have the "
                    f"law's topology ({self.topology.num_gpus} GPUs, switches "
                    f"{list(self.topology.gpus_per_switch)}, capacities "
                    f"{self.topology.pcie_switch_capacity:g}/{self.topology.dram_capacity:g}/"
                    f"{self.topology.nic_capacity:g} B/s): expected the cluster's own")

    def factors(self, application: str) -> np.ndarray:
        """The hidden demand multipliers ``(3,)`` of an application (pcie, dram, nic)."""
        if application not in self._factors:
            index = APPLICATION_NAMES.index(application) if application in APPLICATION_NAMES else 0
            rng = np.random.default_rng([self.seed, index])
            self._factors[application] = rng.lognormal(0.0, self.demand_spread, 3)
        return self._factors[application]

    def _offered(self, jobs: Mapping[str, RunningJob], num_nodes: int
                 ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Job names, per-GPU-slot job index ``(N, G)`` (-1 free), and offered demands
        ``(J, N, G)`` PCIe per GPU slot and ``(J, N, 2)`` DRAM, NIC per node, byte/s."""
        topology = self.topology
        num_gpus = topology.num_gpus
        names = sorted(jobs)
        slot = np.full((num_nodes, num_gpus), -1)
        pcie = np.zeros((len(names), num_nodes, num_gpus))
        node_load = np.zeros((len(names), num_nodes, 2))
        used = np.zeros(num_nodes, dtype=int)
        for j, name in enumerate(names):
            job = jobs[name]
            placement = placement_of(job.counts)
            if not placement:
                continue
            per_gpu = np.array(_demands(job.application, placement, job.local_bsz, topology))
            per_gpu = per_gpu * self.factors(job.application)
            for node in np.flatnonzero(job.counts):
                count = int(job.counts[node])
                start = used[node]
                slot[node, start : start + count] = j
                used[node] += count
                pcie[j, node, start : start + count] = per_gpu[0]
                # NIC traffic is per node and passes through host DRAM too.
                node_load[j, node] = (per_gpu[1] * count + per_gpu[2], per_gpu[2])
        # A job alone never exceeds a capacity: its profile already includes its own contention.
        switch = topology.switch_of_gpu()
        for s in range(topology.num_switches):
            members = switch == s
            total = pcie[:, :, members].sum(-1, keepdims=True)
            pcie[:, :, members] *= np.minimum(1.0, topology.pcie_switch_capacity
                                              / np.maximum(total, 1e-9))
        caps = np.array([topology.dram_capacity, topology.nic_capacity])
        node_load = np.minimum(node_load, caps)
        return names, slot, pcie, node_load

    def _progress(self, jobs: Mapping[str, RunningJob]
                  ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Names, progress ratio ``(J,)``, per-GPU-slot job index ``(N, G)`` (-1 free), used PCIe
        ``(J, N, G)`` and used DRAM/NIC ``(J, N, 2)``."""
        num_nodes = len(next(iter(jobs.values())).counts)
        names, slot, pcie, node_load = self._offered(jobs, num_nodes)
        topology = self.topology
        ratio = np.ones(len(names))
        switch = topology.switch_of_gpu()
        for n in range(num_nodes):
            for s in range(topology.num_switches):
                demand = pcie[:, n, switch == s].sum(-1)
                _bottleneck(ratio, demand, topology.pcie_switch_capacity)
            _bottleneck(ratio, node_load[:, n, 0], topology.dram_capacity)
            _bottleneck(ratio, node_load[:, n, 1], topology.nic_capacity)
        return names, ratio, slot, pcie * ratio[:, None, None], node_load * ratio[:, None, None]

    def slowdowns(self, jobs: Mapping[str, RunningJob]) -> dict[str, float]:
        if not jobs:
            self._last_usage = {}
            return {}
        names, ratio, slot, pcie, node_load = self._progress(jobs)
        self._last_usage = {"pcie": pcie.sum(0), "dram": node_load[:, :, 0].sum(0),
                            "nic": node_load[:, :, 1].sum(0),
                            "busy": (pcie > 0).any(0) | (slot >= 0)}
        return {name: float(1.0 - r) for name, r in zip(names, ratio, strict=True) if r < 1.0}

    def counters(self, start: float, seconds: float, num_nodes: int,
                 rng: np.random.Generator) -> xr.Dataset:
        """Counters of the round just simulated (``[start, start + seconds]``) in the counters
        schema: per GPU ``gpu_gpm_pcie_tx_rate``/``_rx_rate`` (byte/s) and ``gpu_utilization``;
        per node ``perf_dram_read``/``_write`` (cumulative byte counters, with their running
        fractions) and ``network_rx``/``_tx`` (cumulative bytes). Noise, NaN for lost samples."""
        topology = self.topology
        count = self.samples_per_round
        times = start + seconds * (np.arange(count) + 1) / count
        usage = self._last_usage or {
            "pcie": np.zeros((num_nodes, topology.num_gpus)), "dram": np.zeros(num_nodes),
            "nic": np.zeros(num_nodes), "busy": np.zeros((num_nodes, topology.num_gpus), bool)}

        def noisy(values: np.ndarray) -> np.ndarray:
            shaped = np.broadcast_to(values, (count, *values.shape))
            out = shaped * rng.lognormal(0.0, self.noise, shaped.shape)
            out[rng.random(out.shape) < self.missing_fraction] = np.nan
            return out

        def cumulative(name: str, rate: np.ndarray) -> np.ndarray:
            # Bytes counted in each sample interval (noisy), added to the running total.
            step = np.broadcast_to(rate, (count, *rate.shape)) * seconds / count
            step = step * rng.lognormal(0.0, self.noise, step.shape)
            values = self._totals.get(name, np.zeros(rate.shape)) + np.cumsum(step, 0)
            self._totals[name] = values[-1]
            return values

        running = np.clip(rng.uniform(0.3, 0.6, (count, num_nodes)), 0.0, 1.0)
        variables = {
            "gpu_gpm_pcie_tx_rate": noisy(0.4 * usage["pcie"]),
            "gpu_gpm_pcie_rx_rate": noisy(0.6 * usage["pcie"]),
            "gpu_utilization": np.clip(noisy(usage["busy"].astype(float) * 0.9), 0.0, 1.0),
            "perf_dram_read": cumulative("perf_dram_read", 0.6 * usage["dram"]),
            "perf_dram_write": cumulative("perf_dram_write", 0.4 * usage["dram"]),
            "perf_dram_read_running_fraction": running,
            "perf_dram_write_running_fraction": running,
            "network_rx": cumulative("network_rx", 0.5 * usage["nic"]),
            "network_tx": cumulative("network_tx", 0.5 * usage["nic"]),
        }
        return schema.build(times, [f"node{n:03d}" for n in range(num_nodes)], variables,
                            device=list(range(topology.num_gpus)),
                            attrs={"interval_s": seconds / count,
                                   "producer": "bayes_sched.sim.laws.contention.ContentionLaw"})


@cache
def _demands(application: str, placement: tuple[int, ...], local_bsz: int,
             topology: NodeTopology) -> tuple[float, float, float]:
    return job_demands(application, placement, local_bsz, topology)


def _bottleneck(ratio: np.ndarray, demand: np.ndarray, capacity: float) -> None:
    """Lower ``ratio`` in place to each job's granted/offered share of one resource."""
    active = demand > 0
    if active.sum() < 2 or demand.sum() <= capacity:
        return
    grant = max_min_share(demand[active], capacity)
    ratio[active] = np.minimum(ratio[active], grant / demand[active])
