"""All-reduce cost at line rate: the links a data-parallel job's gradients cross and the time a
ring all-reduce takes over them.

A ring all-reduce of ``B`` bytes over ``K`` GPUs moves ``2 (K - 1) / K * B`` bytes over each link
of the ring, so its slowest link sets its time (Patarasuk and Yuan, "Bandwidth optimal all-reduce
algorithms for clusters of workstations", JPDC 2009; the algorithm NCCL runs): at line rate
``bw`` (byte/s) it takes ``ring_seconds(B, K, bw) = 2 (K - 1) / K * B / bw``. Within a node the
slowest link is the GPUs' peer link (PCIe or NVLink); across nodes a ring passes each node's NIC
once per direction. Latency per hop (microseconds) is left out: it matters only for gradients of
kilobytes.

The step-time model's network terms (:mod:`perfmodel.throughput`) in these units
(:func:`line_rate_terms`): ``alpha_r`` and ``alpha_n`` are the ring of two GPUs within a node /
across two nodes, ``B / bw_within`` and ``B / bw_across``; ``beta_r`` and ``beta_n``, the model's
slope per GPU beyond two, are the ring factor's secant from ``K = 2`` to a full node (within) and
to two full nodes (across).

Pure numpy (no torch): the cluster description imports it. Units: bytes, byte/s, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from perfmodel.errors import InputError

#: The four network terms of the step-time model, and which link each one's time is set by.
NETWORK_TERMS: Mapping[str, str] = {"alpha_r": "within", "beta_r": "within",
                                    "alpha_n": "across", "beta_n": "across"}
#: Bytes of one gradient element when a job declares only its parameter count: fp32, as the
#: all-reduce of PyTorch DDP (and AdaptDL, which measured the shipped profiles) runs by default.
DEFAULT_GRADIENT_ELEMENT_BYTES = 4
#: Most parameters a job may declare (10^13, some ten times the largest models trained).
MAX_PARAMETERS = 10**13


@dataclass(frozen=True)
class Links:
    """The links an all-reduce crosses in one cluster, at line rate (byte/s, one direction).

    Attributes:
        within: GPU to GPU inside a node (PCIe or NVLink), byte/s per direction.
        across: a node's network interface, byte/s per direction (the slowest hop of a ring that
            spans nodes; a ring passes each NIC once per direction).
        gpus_per_node: GPUs of one node (where the within-node slope is taken to).
    """

    within: float
    across: float
    gpus_per_node: int

    def __post_init__(self) -> None:
        for name in ("within", "across"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0 < value < 1e15):
                raise InputError(f"links.{name}: {value!r}; expected a bandwidth in byte/s "
                                 "between 0 and 1e15")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) \
                or not 1 <= self.gpus_per_node <= 1024:
            raise InputError(f"links.gpus_per_node: {self.gpus_per_node!r}; expected a whole "
                             "number of GPUs from 1 to 1024")

    def bandwidth(self, link: str) -> float:
        """Line rate of ``"within"`` or ``"across"``, byte/s."""
        return float(self.within if link == "within" else self.across)


#: The Pollux artifact's testbed, where the shipped profiles were measured: AWS g4dn.12xlarge
#: nodes of 4 NVIDIA T4 GPUs (Qiao et al., OSDI 2021, section 5.1). Within a node the T4's
#: PCIe 3.0 x16 interface, 15.75 GB/s per direction (NVIDIA T4 datasheet: "PCIe Gen3 x16,
#: 32 GB/sec" both directions; 8 GT/s x 16 lanes x 128/130 encoding); across nodes the
#: instance's 50 Gbit/s network (AWS EC2 G4 instance page), 6.25e9 byte/s.
POLLUX_LINKS = Links(within=8e9 * 16 * 128 / 130 / 8, across=50e9 / 8, gpus_per_node=4)


def gradient_bytes(parameters: int, element_bytes: int = DEFAULT_GRADIENT_ELEMENT_BYTES) -> float:
    """Bytes of one gradient all-reduce for a model of ``parameters`` trainable parameters."""
    if isinstance(parameters, bool) or not isinstance(parameters, int | np.integer) \
            or not 1 <= parameters <= MAX_PARAMETERS:
        raise InputError(f"parameters: {parameters!r}; expected a whole number from 1 to "
                         f"{MAX_PARAMETERS:.0e}")
    if element_bytes not in (1, 2, 4, 8):
        raise InputError(f"gradient element bytes: {element_bytes!r}; expected 1, 2, 4 or 8")
    return float(parameters) * element_bytes


def ring_factor(num_replicas: np.ndarray | int) -> np.ndarray:
    """``2 (K - 1) / K``: multiples of the gradient bytes a ring all-reduce of ``K`` GPUs moves
    over each link (0 for one GPU); shape of ``num_replicas``."""
    k = np.asarray(num_replicas, dtype=np.float64)
    return 2 * (k - 1) / k


def ring_seconds(grad_bytes: float, num_replicas: np.ndarray | int, bandwidth: float
                 ) -> np.ndarray:
    """Seconds of a ring all-reduce of ``grad_bytes`` over ``num_replicas`` GPUs whose slowest
    link carries ``bandwidth`` byte/s; shape of ``num_replicas``."""
    return ring_factor(num_replicas) * grad_bytes / bandwidth


def _secant_slope(upper: int) -> float:
    # Ring factor's rise per GPU from K = 2 (factor 1) to K = upper (at least 3).
    upper = max(upper, 3)
    return float((ring_factor(upper) - 1) / (upper - 2))


def line_rate_terms(grad_bytes: float, links: Links) -> dict[str, float]:
    """The four network terms (:data:`NETWORK_TERMS`, seconds and seconds per GPU) of a job whose
    all-reduce moves ``grad_bytes`` at the links' line rates (see the module docstring)."""
    if not (math.isfinite(grad_bytes) and grad_bytes > 0):
        raise InputError(f"gradient bytes: {grad_bytes!r}; expected a positive number")
    within = grad_bytes / links.within
    across = grad_bytes / links.across
    return {"alpha_r": within, "beta_r": within * _secant_slope(links.gpus_per_node),
            "alpha_n": across, "beta_n": across * _secant_slope(2 * links.gpus_per_node)}
