"""A cluster described as data: its nodes (GPU type, GPU count, topology), restart delays and the
scheduling round, read from a short string or a TOML/JSON file.

Short strings (entries separated by commas, nodes in the order written):

* ``v100:36`` -- 36 V100 GPUs in nodes of :data:`DEFAULT_GPUS_PER_NODE` (4; Gavel's servers hold
  4 GPUs of a type); a count that does not fill whole nodes is an error (write ``v100:9x4``);
* ``v100:9x4`` or ``9x4:v100`` -- 9 nodes of 4 V100 GPUs each;
* ``v100:36,p100:36,k80:36`` -- Gavel's heterogeneous cluster, 27 nodes.

A file (TOML or JSON; every key optional except ``nodes``)::

    restart_delay = 30.0        # seconds a restarted job loses, applications not listed below
    round_interval = 60.0       # seconds per scheduling round
    nodes = "16x4:t4"           # a short string, or tables:

    [[nodes]]
    gpu_type = "v100"
    count = 9                   # nodes of this kind (default 1)
    gpus = 4                    # GPUs per node
    [nodes.topology]            # default: DEFAULT_TOPOLOGY's capacities, 2 GPUs per switch
    gpus_per_switch = [2, 2]
    switch_numa = [0, 0]
    pcie_switch_capacity = 12e9
    dram_capacity = 60e9
    nic_capacity = 6.25e9

    [[gpu_types]]               # optional: GPU types beside the built-in ones
    name = "mi250x"             # (bayes_sched.gpu_types.declared_gpu_type: memory_gib,
    memory_gib = 64             #  peak_tflops, tensor_tflops, interconnect, link_gbytes_per_s)
    peak_tflops = 47.9
    interconnect = "pcie"
    link_gbytes_per_s = 31.5

    [restart_delays]            # per application, seconds (measured costs range 25-250 s)
    imagenet = 250.0

    [[tenants]]                 # optional: the teams sharing the cluster (bayes_sched.tenants)
    name = "vision"
    quota = 16                  # GPUs, or per GPU type: quota = { v100 = 8 }
    weight = 1.0
    lend = true
    borrow = true

A node's ``gpu_type`` is a built-in type (:data:`~bayes_sched.gpu_types.GPU_TYPES`) or one the
file declares in ``[[gpu_types]]``; the spec keeps the declared ones (:attr:`ClusterSpec.declared`)
and looks every type up in its :attr:`ClusterSpec.catalog`.

Every error is one line naming the file and the field (``nodes[1].gpus``,
``gpu_types[0].peak_tflops``) and what was expected.

Size bounds (:func:`check_cluster_size`), checked before any node is built: at most
:data:`MAX_NODES` nodes, :data:`MAX_GPUS_PER_NODE` GPUs per node and :data:`MAX_CLUSTER_GPUS`
GPUs in all (2^20, the readers' bound on GPUs: ``perfmodel.textio.MAX_GPUS``).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.gpu_types import GPU_TYPES, GpuType, declared_gpu_type, gpu_catalog, gpu_type
from bayes_sched.round_timing import DEFAULT_RESTART_DELAY as DEFAULT_RESTART_DELAY
from bayes_sched.round_timing import DEFAULT_ROUND_INTERVAL as DEFAULT_ROUND_INTERVAL
from bayes_sched.tenants import TenantSpec, TenantTable, check_tenants, entitlements, parse_tenants
from bayes_sched.topology import NodeTopology, TopologyError
from perfmodel import textio

if TYPE_CHECKING:
    from perfmodel.allreduce import Links

#: GPUs per node where a spec gives only a GPU count per type.
DEFAULT_GPUS_PER_NODE = 4

#: Most GPUs in one cluster: 2^20 (``perfmodel.textio.MAX_GPUS``, the bound every reader puts on
#: a GPU count), some 250 times the largest clusters trained on.
MAX_CLUSTER_GPUS = textio.MAX_GPUS
#: Most nodes in one cluster (2^16): allocations are ``(jobs, nodes)`` arrays.
MAX_NODES = 2**16
#: Most GPUs on one node (a node's topology lists its PCIe switches; 8-16 GPUs are built).
MAX_GPUS_PER_NODE = 1024


#: The Pollux artifact's node (AWS g4dn.12xlarge: 4 T4 GPUs on PCIe 3.0, two per switch, one
#: socket, 50 Gbit/s network), capacities in byte/s. Its capacities are every default node's.
DEFAULT_TOPOLOGY = NodeTopology(gpus_per_switch=(2, 2), switch_numa=(0, 0),
                                pcie_switch_capacity=12e9, dram_capacity=60e9,
                                nic_capacity=6.25e9)


def check_cluster_size(num_nodes: int, total_gpus: int, largest_node: int, where: str) -> None:
    """Refuse a cluster of ``num_nodes`` nodes and ``total_gpus`` GPUs whose largest node holds
    ``largest_node``, beyond :data:`MAX_NODES`, :data:`MAX_CLUSTER_GPUS` or
    :data:`MAX_GPUS_PER_NODE`: one :class:`InputError` line naming ``where`` (the flag, file or
    field) and the bound. Called with the counts alone, before any node is built."""
    for count, bound, what in ((largest_node, MAX_GPUS_PER_NODE, "GPUs per node"),
                               (num_nodes, MAX_NODES, "nodes in a cluster"),
                               (total_gpus, MAX_CLUSTER_GPUS, "GPUs in a cluster")):
        if count > bound:
            raise InputError(f"{where}: {count} {what.split(' in ')[0]}; expected at most "
                             f"{bound} {what}")


def default_topology(num_gpus: int) -> NodeTopology:
    """A node of ``num_gpus`` GPUs laid out as :data:`DEFAULT_TOPOLOGY`: two GPUs per PCIe switch
    (the last switch holds one when the count is odd), one NUMA node, the same capacities."""
    if num_gpus < 1:
        raise InputError(f"a node of {num_gpus} GPUs: expected at least 1")
    switches = (2,) * (num_gpus // 2) + ((1,) if num_gpus % 2 else ())
    return replace(DEFAULT_TOPOLOGY, gpus_per_switch=switches, switch_numa=(0,) * len(switches))


@dataclass(frozen=True)
class NodeSpec:
    """One node: its GPU type, GPU count and topology (which must hold exactly its GPUs). The
    type is a name; the cluster holding the node checks it against its catalog (built-in and
    declared types, :attr:`ClusterSpec.catalog`)."""

    gpu_type: str
    num_gpus: int
    topology: NodeTopology

    def __post_init__(self) -> None:
        if not isinstance(self.gpu_type, str) or not self.gpu_type:
            raise InputError(f"gpu_type is {self.gpu_type!r}: expected a GPU type's name",
                             column="gpu_type")
        if isinstance(self.num_gpus, bool) or not isinstance(self.num_gpus, int | np.integer) \
                or self.num_gpus < 1:
            raise InputError(f"gpus is {self.num_gpus!r}: expected a whole number of GPUs >= 1",
                             column="gpus")
        if self.topology.num_gpus != self.num_gpus:
            raise InputError(f"topology has {self.topology.num_gpus} GPUs under its PCIe switches "
                             f"({list(self.topology.gpus_per_switch)}), the node has "
                             f"{self.num_gpus}: expected a topology that fits its node",
                             column="topology.gpus_per_switch")


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster: nodes in order (an allocation's ``(num_nodes,)`` axis follows it), restart
    delays and the round interval.

    Attributes:
        nodes: every node, in allocation order.
        restart_delay: seconds a restarted job loses where its application has no entry in
            ``restart_delays``.
        restart_delays: seconds per application (read-only mapping).
        round_interval: seconds per scheduling round.
        tenants: the teams sharing it (:mod:`bayes_sched.tenants`); none: one default tenant.
        declared: GPU types the cluster declares beside the built-in ones (its file's
            ``[[gpu_types]]``, :func:`~bayes_sched.gpu_types.declared_gpu_type`).
    """

    nodes: tuple[NodeSpec, ...]
    restart_delay: float = DEFAULT_RESTART_DELAY
    restart_delays: Mapping[str, float] = field(default_factory=dict, hash=False)
    round_interval: float = DEFAULT_ROUND_INTERVAL
    tenants: tuple[TenantSpec, ...] = ()
    declared: tuple[GpuType, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "declared", tuple(self.declared))
        catalog = self.catalog
        for index, node in enumerate(self.nodes):
            if node.gpu_type not in catalog:
                raise InputError(f"unknown GPU type {node.gpu_type!r}; expected one of "
                                 f"{', '.join(catalog)} (or a type declared in [[gpu_types]])",
                                 column=f"nodes[{index}].gpu_type")
        check_cluster_size(len(self.nodes), sum(n.num_gpus for n in self.nodes),
                           max((n.num_gpus for n in self.nodes), default=0), "nodes")
        object.__setattr__(self, "restart_delays",
                           MappingProxyType({str(k): float(v)
                                             for k, v in dict(self.restart_delays).items()}))
        if not self.nodes:
            raise InputError("nodes: none; expected at least one node", column="nodes")
        for key, value in (("restart_delay", self.restart_delay),
                           *((f"restart_delays.{k}", v) for k, v in self.restart_delays.items())):
            if not math.isfinite(value) or value < 0:
                raise InputError(f"{key} is {value}: expected seconds >= 0", column=key)
        if not math.isfinite(self.round_interval) or self.round_interval <= 0:
            raise InputError(f"round_interval is {self.round_interval}: expected seconds > 0",
                             column="round_interval")
        object.__setattr__(self, "tenants", tuple(self.tenants))
        check_tenants(self.tenants, {t: self.gpus_of_type(t) for t in self.types},
                      lambda key, message: InputError(message, column=key))

    @classmethod
    def homogeneous(cls, num_nodes: int, gpus_per_node: int, gpu_type: str = "t4",
                    topology: NodeTopology | None = None,
                    restart_delay: float = DEFAULT_RESTART_DELAY,
                    round_interval: float = DEFAULT_ROUND_INTERVAL) -> ClusterSpec:
        """``num_nodes`` equal nodes of ``gpus_per_node`` GPUs of one type (default: the
        artifact's T4 nodes, :func:`default_topology`)."""
        if num_nodes < 1:
            raise InputError(f"num_nodes is {num_nodes}: expected at least 1",
                             column="num_nodes")
        if gpus_per_node < 1:
            raise InputError(f"gpus_per_node is {gpus_per_node}: expected at least 1",
                             column="gpus_per_node")
        check_cluster_size(num_nodes, num_nodes * gpus_per_node, gpus_per_node,
                           f"{num_nodes}x{gpus_per_node}:{gpu_type}")
        node = NodeSpec(gpu_type, gpus_per_node, topology or default_topology(gpus_per_node))
        return cls((node,) * num_nodes, restart_delay=restart_delay,
                   round_interval=round_interval)

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy does not pickle; compare sends configs to worker processes.
        return (ClusterSpec, (self.nodes, self.restart_delay, dict(self.restart_delays),
                              self.round_interval, self.tenants, self.declared))

    def __repr__(self) -> str:
        delays = f", restart_delays={dict(self.restart_delays)}" if self.restart_delays else ""
        tenants = f", tenants={[t.name for t in self.tenants]}" if self.tenants else ""
        declared = f", declared={[t.name for t in self.declared]}" if self.declared else ""
        return (f"ClusterSpec({self.describe()!r}, restart_delay={self.restart_delay:g}{delays}, "
                f"round_interval={self.round_interval:g}{tenants}{declared})")

    @property
    def catalog(self) -> Mapping[str, GpuType]:
        """The GPU types this cluster knows by name: the built-in ones and :attr:`declared`."""
        return gpu_catalog(self.declared)

    def gpu_type_of(self, name: str) -> GpuType:
        """The GPU type called ``name`` in :attr:`catalog`; :class:`InputError` if unknown."""
        return gpu_type(name, "gpu type", self.catalog)

    def links_of(self, name: str) -> Links:
        """The links an all-reduce of a job on nodes of GPU type ``name`` crosses (the sync
        prior's, :mod:`perfmodel.sync_prior`): the type's peer link within a node, the NIC of
        the first node of that type across nodes, that node's GPUs as the node size.

        Raises:
            InputError: a type the cluster has no node of, or whose peer link is unknown.
        """
        node = next((n for n in self.nodes if n.gpu_type == name), None)
        if node is None:
            raise InputError(f"no node of GPU type {name!r}; expected one of "
                             f"{', '.join(self.types)}", column="gpu_type")
        return self.gpu_type_of(name).links(node.topology.nic_capacity, node.num_gpus)

    def tenant_table(self) -> TenantTable:
        """The tenants with their entitlements in GPUs (:func:`bayes_sched.tenants.entitlements`;
        one default tenant with every GPU where the cluster lists none)."""
        return entitlements(self.tenants, self.total_gpus)

    # --- shape -------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def capacity(self) -> np.ndarray:
        """GPUs per node, shape ``(num_nodes,)``."""
        return np.array([node.num_gpus for node in self.nodes], dtype=np.int64)

    @property
    def total_gpus(self) -> int:
        return sum(node.num_gpus for node in self.nodes)

    @property
    def gpus_per_node(self) -> int:
        """GPUs on each node; raises :class:`InputError` when nodes hold different counts (code
        that assumes equal nodes refuses such a cluster clearly rather than misplace GPUs)."""
        counts = sorted({node.num_gpus for node in self.nodes})
        if len(counts) > 1:
            raise InputError(f"nodes hold {', '.join(map(str, counts))} GPUs: expected equal "
                             "nodes (this code reads one GPUs-per-node figure)",
                             column="gpus_per_node")
        return counts[0]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU type of each node, shape ``(num_nodes,)``."""
        return tuple(node.gpu_type for node in self.nodes)

    @property
    def types(self) -> tuple[str, ...]:
        """The distinct GPU types, in order of first appearance."""
        return tuple(dict.fromkeys(self.gpu_types))

    def nodes_of_type(self, name: str) -> np.ndarray:
        """Indices of the nodes of GPU type ``name``."""
        self.gpu_type_of(name)
        return np.array([i for i, t in enumerate(self.gpu_types) if t == name], dtype=np.int64)

    def gpus_of_type(self, name: str) -> int:
        """GPUs of type ``name`` in the cluster (0 for a known type it has none of)."""
        self.gpu_type_of(name)
        return sum(node.num_gpus for node in self.nodes if node.gpu_type == name)

    @property
    def topology(self) -> NodeTopology:
        """The topology every node shares; raises :class:`InputError` when they differ."""
        distinct = list(dict.fromkeys(node.topology for node in self.nodes))
        if len(distinct) > 1:
            raise InputError(f"nodes have {len(distinct)} different topologies: expected one "
                             "shared by every node (this code models one node layout)",
                             column="topology")
        return distinct[0]

    def restart_delay_of(self, application: str) -> float:
        """Seconds a restarted job of ``application`` loses."""
        return self.restart_delays.get(application, self.restart_delay)

    def describe(self) -> str:
        """The short string of this cluster's nodes (``"9x4:v100,9x4:p100"``)."""
        runs: list[list[Any]] = []
        for node in self.nodes:
            if runs and runs[-1][1:] == [node.num_gpus, node.gpu_type]:
                runs[-1][0] += 1
            else:
                runs.append([1, node.num_gpus, node.gpu_type])
        return ",".join(f"{n}x{g}:{t}" for n, g, t in runs)


# --- reading ---------------------------------------------------------------------------------------

_COUNT = r"(\d+)"
_SHAPE = r"(\d+)x(\d+)"
#: Digits a count may have before it is refused unread (int() of a long string is slow).
_MAX_DIGITS = 12
_TYPE = r"([A-Za-z][\w-]*)"


def parse_cluster_spec(text: str, where: str = "cluster") -> ClusterSpec:
    """A cluster from a short string (see the module docstring), e.g. ``"16x4:t4"``."""
    return ClusterSpec(_parse_nodes(text, where))


def _parse_nodes(text: str, where: str, catalog: Mapping[str, GpuType] = GPU_TYPES
                 ) -> tuple[NodeSpec, ...]:
    nodes: list[NodeSpec] = []
    entries = [e.strip() for e in str(text).split(",")]
    if not any(entries):
        raise InputError(f"{where}: empty; expected e.g. 16x4:t4 or v100:36,p100:36")
    total_gpus = 0
    for entry in entries:
        label = f"{where} entry {entry!r}"
        if any(len(digits) > _MAX_DIGITS for digits in re.findall(r"\d+", entry)):
            raise InputError(f"{label}: a count of more than {_MAX_DIGITS} digits; expected at "
                             f"most {MAX_NODES} nodes of at most {MAX_GPUS_PER_NODE} GPUs and "
                             f"{MAX_CLUSTER_GPUS} GPUs in a cluster")
        if match := re.fullmatch(f"{_TYPE}:{_SHAPE}", entry):
            name, count, gpus = match[1], int(match[2]), int(match[3])
        elif match := re.fullmatch(f"{_SHAPE}:{_TYPE}", entry):
            count, gpus, name = int(match[1]), int(match[2]), match[3]
        elif match := re.fullmatch(f"{_TYPE}:{_COUNT}", entry):
            name, total = match[1], int(match[2])
            gpus = DEFAULT_GPUS_PER_NODE
            if total < 1 or total % gpus:
                raise InputError(f"{label}: {total} GPUs; expected a positive multiple of "
                                 f"{gpus} (nodes of {gpus}), or NODESxGPUS such as "
                                 f"{name}:{max(total, 1)}x1")
            count = total // gpus
        else:
            raise InputError(f"{label}: expected TYPE:GPUS, TYPE:NODESxGPUS or NODESxGPUS:TYPE "
                             f"with TYPE one of {', '.join(catalog)}")
        gpu_type(name.lower(), label, catalog)
        if count < 1 or gpus < 1:
            raise InputError(f"{label}: {count} nodes of {gpus} GPUs; expected at least 1 of "
                             "each")
        total_gpus += count * gpus
        check_cluster_size(len(nodes) + count, total_gpus, gpus, label)
        node = NodeSpec(name.lower(), gpus, default_topology(gpus))
        nodes.extend([node] * count)
    return tuple(nodes)


def read_cluster_spec(path: str | PathLike[str]) -> ClusterSpec:
    """A cluster from a TOML (``.toml``) or JSON file (see the module docstring)."""
    file = Path(path)
    text = textio.read_text(file, InputError)
    if file.suffix == ".json":
        raw = textio.loads_json(text, file, InputError)
    else:
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise InputError(f"not TOML ({error})", file) from None
    return cluster_spec_from_dict(raw, file)


def cluster_spec_from_dict(raw: Any, source: str | PathLike[str] | None = None) -> ClusterSpec:
    """A cluster from parsed TOML/JSON (the file layout of the module docstring)."""
    path = Path(source) if source is not None else None

    def fail(key: str, message: str) -> InputError:
        return InputError(message, path, column=key)

    if not isinstance(raw, Mapping):
        raise fail("nodes", "expected a table of cluster settings")
    known = {"nodes", "restart_delay", "restart_delays", "round_interval", "tenants",
             "gpu_types"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise fail(unknown[0], f"unknown field; expected {', '.join(sorted(known))}")
    if "nodes" not in raw:
        raise fail("nodes", "missing; expected a short string or a list of node tables")
    declared = _declared_types(raw.get("gpu_types", []), fail)
    catalog = gpu_catalog(declared)
    entries = raw["nodes"]
    if isinstance(entries, str):
        try:
            nodes = _parse_nodes(entries, "nodes", catalog)
        except InputError as error:
            raise fail("nodes", str(error).removeprefix("nodes: ").removeprefix("nodes ")) \
                from None
    elif isinstance(entries, Sequence) and entries:
        nodes = _node_entries(entries, fail, catalog)
    else:
        raise fail("nodes", "expected a short string or a non-empty list of node tables")
    settings: dict[str, Any] = {"declared": declared}
    for key in ("restart_delay", "round_interval"):
        if key in raw:
            settings[key] = _seconds(raw[key], key, fail)
    delays = raw.get("restart_delays", {})
    if not isinstance(delays, Mapping):
        raise fail("restart_delays", "expected a table of application = seconds")
    settings["restart_delays"] = {str(k): _seconds(v, f"restart_delays.{k}", fail)
                                  for k, v in delays.items()}
    if "tenants" in raw:
        gpus_by_type: dict[str, int] = {}
        for node in nodes:
            gpus_by_type[node.gpu_type] = gpus_by_type.get(node.gpu_type, 0) + node.num_gpus
        settings["tenants"] = parse_tenants(raw["tenants"], gpus_by_type, fail)
    try:
        return ClusterSpec(nodes, **settings)
    except InputError as error:
        raise fail(error.column or "nodes", str(error).split(": ", 1)[-1]) from None


def _declared_types(tables: Any, fail: Any) -> tuple[GpuType, ...]:
    """The ``[[gpu_types]]`` tables as GPU types (each checked by
    :func:`~bayes_sched.gpu_types.declared_gpu_type`); a name declared twice is refused."""
    if isinstance(tables, str | bytes) or not isinstance(tables, Sequence):
        raise fail("gpu_types", "expected a list of GPU type tables ([[gpu_types]])")
    declared: list[GpuType] = []
    for index, table in enumerate(tables):
        where = f"gpu_types[{index}]"
        try:
            gpu = declared_gpu_type(table, where)
        except InputError as error:
            key, _, message = str(error).partition(": ")
            raise fail(key, message) from None
        if any(other.name == gpu.name for other in declared):
            raise fail(f"{where}.name", f"{gpu.name!r} declared twice; expected one table per "
                       "name")
        declared.append(gpu)
    return tuple(declared)


def _seconds(value: Any, key: str, fail: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(key, f"{value!r}: expected seconds (a number)")
    return float(value)


def _node_entries(entries: Sequence[Any], fail: Any,
                  catalog: Mapping[str, GpuType] = GPU_TYPES) -> tuple[NodeSpec, ...]:
    """The nodes of a list of node tables; the cluster's size is checked before each table's
    nodes are built."""
    nodes: list[NodeSpec] = []
    total_gpus = 0
    for index, entry in enumerate(entries):
        if len(nodes) >= MAX_NODES:
            raise fail(f"nodes[{index}]", f"{len(entries)} node tables; expected at most "
                       f"{MAX_NODES} nodes in a cluster")
        node, count = _node_entry(entry, index, fail, catalog)
        total_gpus += count * node.num_gpus
        try:
            check_cluster_size(len(nodes) + count, total_gpus, node.num_gpus, "nodes")
        except InputError as error:
            raise fail(f"nodes[{index}].count", str(error).removeprefix("nodes: ")) from None
        nodes.extend([node] * count)
    return tuple(nodes)


def _node_entry(entry: Any, index: int, fail: Any, catalog: Mapping[str, GpuType] = GPU_TYPES
                ) -> tuple[NodeSpec, int]:
    """One node table: its node and how many of it (``count``)."""
    where = f"nodes[{index}]"
    if not isinstance(entry, Mapping):
        raise fail(where, "expected a table with gpu_type, gpus, count, topology")
    known = {"gpu_type", "gpus", "count", "topology"}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown field; expected {', '.join(sorted(known))}")
    for key in ("gpu_type", "gpus"):
        if key not in entry:
            raise fail(f"{where}.{key}", "missing")
    name = entry["gpu_type"]
    if not isinstance(name, str) or name.lower() not in catalog:
        raise fail(f"{where}.gpu_type", f"unknown GPU type {name!r}; expected one of "
                   f"{', '.join(catalog)} (or a type declared in [[gpu_types]])")
    counts = {}
    for key, default, bound in (("gpus", None, MAX_GPUS_PER_NODE), ("count", 1, MAX_NODES)):
        value = entry.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            raise fail(f"{where}.{key}", f"{value!r}: expected a whole number in [1, {bound}]")
        counts[key] = value
    topology_raw = entry.get("topology")
    try:
        if topology_raw is None:
            topology = default_topology(counts["gpus"])
        elif isinstance(topology_raw, Mapping):
            topology = _topology(topology_raw)
        else:
            raise TopologyError("expected a table")
        node = NodeSpec(name.lower(), counts["gpus"], topology)
    except TopologyError as error:
        message = str(error)
        key, _, rest = message.partition(": ")
        raise fail(f"{where}.topology.{key}" if rest else f"{where}.topology",
                   rest or message) from None
    except InputError as error:
        raise fail(f"{where}.{error.column or 'gpus'}", str(error).split(": ", 1)[-1]) from None
    return node, counts["count"]


def _topology(raw: Mapping[str, Any]) -> NodeTopology:
    known = {f.name for f in fields(NodeTopology)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise TopologyError(f"{unknown[0]}: unknown field; expected {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("gpus_per_switch", "switch_numa"):
            if not isinstance(value, list) or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise TopologyError(f"{key}: {value!r}; expected a list of whole numbers")
            values[key] = tuple(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TopologyError(f"{key}: {value!r}; expected a byte/s figure")
            values[key] = float(value)
    if "gpus_per_switch" in values and "switch_numa" not in values:
        values["switch_numa"] = (0,) * len(values["gpus_per_switch"])
    base = DEFAULT_TOPOLOGY
    return NodeTopology(**{**{f.name: getattr(base, f.name) for f in fields(NodeTopology)},
                           **values})


def load_cluster_spec(text_or_path: str | PathLike[str]) -> ClusterSpec:
    """A cluster from a file path (an existing file, or a name ending in ``.toml``/``.json``) or
    else a short string."""
    text = str(text_or_path)
    if Path(text).is_file() or text.endswith((".toml", ".json")):
        return read_cluster_spec(text)
    return parse_cluster_spec(text, "--cluster")
