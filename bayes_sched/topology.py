"""Node topology: which GPUs sit under which PCIe switch, NUMA node and NIC, and resource
capacities.

The contention model takes its architecture invariants from here: the traffic of the GPUs under one
PCIe switch adds up to the switch's traffic and cannot exceed its capacity; host DMA traffic of the
GPUs and the NIC is part of the node's DRAM traffic; a GPU's SMs are shared by the jobs placed on
it.

A topology is read from a small JSON file (every node of a cluster shares one layout)::

    {"gpus_per_switch": [2, 2, 2, 2],       # GPUs under each PCIe switch, in device order
     "switch_numa": [0, 0, 1, 1],           # NUMA node each switch hangs off
     "pcie_switch_capacity": 24e9,          # byte/s, both directions summed, per switch
     "dram_capacity": 120e9,                # byte/s, whole node
     "nic_capacity": 12.5e9}                # byte/s, whole node (sum over NICs)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from bayes_sched.errors import InputError
from perfmodel import textio


class TopologyError(InputError):
    """A topology file or description that cannot be used; the message names the field."""


#: Bounds of a node's layout: PCIe switches per node, GPUs under one switch, NUMA node index.
MAX_SWITCHES = 256
MAX_GPUS_PER_SWITCH = 256
MAX_NUMA_NODE = 1023
#: Capacities above 1 PB/s are a unit error (bit/s for byte/s at the least) or corrupt input.
MAX_CAPACITY = 1e15


#: Shared resource kinds, in the order reports list them.
RESOURCE_KINDS: tuple[str, ...] = ("pcie_switch", "dram", "nic", "gpu_sm")


@dataclass(frozen=True)
class NodeTopology:
    """The shared resources of one node. Capacities in byte/s; GPU SM capacity is 1 (a fraction)."""

    gpus_per_switch: tuple[int, ...] = (2, 2, 2, 2)
    switch_numa: tuple[int, ...] = (0, 0, 1, 1)
    pcie_switch_capacity: float = 24e9
    dram_capacity: float = 120e9
    nic_capacity: float = 12.5e9

    def __post_init__(self) -> None:
        if not self.gpus_per_switch or any(not _is_count(g) or g < 1
                                           for g in self.gpus_per_switch):
            raise TopologyError("gpus_per_switch: expected a non-empty list of positive counts")
        if any(not _is_count(n) or n < 0 for n in self.switch_numa):
            raise TopologyError("switch_numa: expected a list of NUMA node indices >= 0")
        if len(self.switch_numa) != len(self.gpus_per_switch):
            raise TopologyError(
                f"switch_numa: {len(self.switch_numa)} entries, expected one per switch "
                f"({len(self.gpus_per_switch)})"
            )
        for name in ("pcie_switch_capacity", "dram_capacity", "nic_capacity"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise TopologyError(f"{name}: {value!r}; expected a positive byte/s figure")

    @property
    def num_gpus(self) -> int:
        return int(sum(self.gpus_per_switch))

    @property
    def num_switches(self) -> int:
        return len(self.gpus_per_switch)

    def switch_of_gpu(self) -> np.ndarray:
        """``(G,)`` index of the PCIe switch each GPU hangs off."""
        return np.repeat(np.arange(self.num_switches), self.gpus_per_switch)

    def switch_membership(self) -> np.ndarray:
        """``(S, G)`` 0/1 matrix: row ``s`` selects the GPUs under switch ``s``."""
        out = np.zeros((self.num_switches, self.num_gpus))
        out[self.switch_of_gpu(), np.arange(self.num_gpus)] = 1.0
        return out

    def resources(self) -> list[tuple[str, str, float]]:
        """Every shared resource of a node: ``(name, kind, capacity)``."""
        out = [
            (f"pcie_switch{s}", "pcie_switch", self.pcie_switch_capacity)
            for s in range(self.num_switches)
        ]
        out.append(("dram", "dram", self.dram_capacity))
        out.append(("nic", "nic", self.nic_capacity))
        out.extend((f"gpu{g}_sm", "gpu_sm", 1.0) for g in range(self.num_gpus))
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _is_count(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def read_topology(path: str | PathLike[str]) -> NodeTopology:
    """Read a topology JSON file (see the module docstring); unknown keys are errors.

    Counts must be JSON integers and capacities JSON numbers (not strings, booleans or fractions);
    bad bytes, deep nesting or huge integers raise :class:`TopologyError` naming file and field.
    """
    file = Path(path)
    raw = textio.read_json(file, TopologyError)
    if not isinstance(raw, dict):
        raise TopologyError("expected a JSON object", file)
    known = list(NodeTopology.__dataclass_fields__)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise TopologyError(f"unknown field {unknown[0]!r}; expected {sorted(known)}", file)
    fields: dict[str, Any] = {}
    for name, value in raw.items():
        try:
            if name == "gpus_per_switch":
                fields[name] = _int_list(value, 1, MAX_GPUS_PER_SWITCH)
            elif name == "switch_numa":
                fields[name] = _int_list(value, 0, MAX_NUMA_NODE)
            else:
                fields[name] = textio.json_number(value, 0.0, MAX_CAPACITY, above_minimum=True)
        except ValueError as error:
            raise TopologyError(f"field '{name}': {error}", file) from None
    try:
        return NodeTopology(**fields)
    except TopologyError as error:
        raise TopologyError(f"{error}", file) from None


def _int_list(value: Any, minimum: int, maximum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SWITCHES:
        raise ValueError(f"expected a list of 1 to {MAX_SWITCHES} integers in "
                         f"[{minimum}, {maximum}], one per PCIe switch")
    out = []
    for position, item in enumerate(value, start=1):
        try:
            out.append(textio.json_int(item, minimum, maximum))
        except ValueError as error:
            raise ValueError(f"entry {position}, {error}") from None
    return tuple(out)
