"""Topology discovery: build a :class:`~bayes_sched.topology.NodeTopology` from the node.

Two sources, both read-only:

- sysfs (:func:`discover_sysfs`): every NVIDIA display/3D controller under
  ``<root>/bus/pci/devices`` (vendor ``0x10de``, class ``0x03xxxx``). Each entry is a symlink into
  ``<root>/devices/pciDDDD:BB/<root port>/.../<bdf>``; the path is the PCIe tree. GPUs whose paths
  share the bridge just below the root complex (the root port, whose link a PCIe switch's GPUs
  share on their way to host memory) form one switch group. The group's NUMA node is the GPUs'
  ``numa_node`` (``-1``, unknown, reads as 0); its capacity is the ``max_link_speed`` x
  ``max_link_width`` of the device on that root port (both directions summed). NICs are the
  entries of ``<root>/class/net`` and ``<root>/class/infiniband`` with a ``device`` link; their
  line rates (``net/<if>/speed`` in Mb/s, ``infiniband/<hca>/ports/*/rate``) add up to the NIC
  capacity.
- NVML (:func:`discover_nvml`, needs the driver's ``libnvidia-ml.so.1``): GPUs in NVML order,
  grouped by ``nvmlDeviceGetTopologyCommonAncestor`` (a common ancestor no further than
  ``NVML_TOPOLOGY_MULTIPLE``, i.e. behind one switch tree without crossing a host bridge, is one
  group), NUMA node from ``nvmlDeviceGetNumaNodeId`` and link capacity from
  ``nvmlDeviceGetMaxPcieLinkGeneration``/``Width``.

Neither source knows the host memory bandwidth: ``dram_capacity`` keeps the given default and the
result's ``notes`` say so. GPU order is PCI bus id order (as NVML and ``CUDA_DEVICE_ORDER=
PCI_BUS_ID`` number devices); a layout whose switch groups are not contiguous in that order cannot be
described by ``gpus_per_switch`` and is an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from bayes_sched.topology import NodeTopology, TopologyError

NVIDIA_VENDOR = "0x10de"
#: PCIe payload bandwidth per lane and direction, byte/s, by transfer rate (GT/s): 8b/10b coding
#: up to 5 GT/s, 128b/130b from 8 GT/s on.
LANE_BYTES_PER_S: dict[float, float] = {
    2.5: 0.25e9,
    5.0: 0.5e9,
    8.0: 8e9 / 8 * 128 / 130,
    16.0: 16e9 / 8 * 128 / 130,
    32.0: 32e9 / 8 * 128 / 130,
    64.0: 64e9 / 8 * 242 / 256,
}
#: PCIe generation -> transfer rate, GT/s (NVML reports generations).
GENERATION_GT_S: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
#: nvmlGpuTopologyLevel_t: devices reachable without crossing a host bridge.
NVML_TOPOLOGY_MULTIPLE = 20
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class Discovery:
    """A discovered topology and what it was built from.

    ``gpus``: PCI addresses in device order; ``switches``: the PCI address each group hangs off
    (root port for sysfs, first GPU's address for NVML); ``nics``: interface names; ``notes``: what
    had to be assumed.
    """

    topology: NodeTopology
    source: str
    gpus: tuple[str, ...]
    switches: tuple[str, ...]
    nics: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def discover_topology(
    sysfs_root: str | os.PathLike[str] = "/sys",
    use_nvml: bool = True,
    defaults: NodeTopology | None = None,
) -> Discovery:
    """NVML where it answers (``use_nvml``), else sysfs under ``sysfs_root``.

    NIC capacity always comes from sysfs (NVML does not know NICs). Raises
    :class:`~bayes_sched.topology.TopologyError` when neither finds a GPU.
    """
    defaults = defaults or NodeTopology()
    nvml_note = None
    if use_nvml:
        try:
            found = discover_nvml(defaults)
        except TopologyError as error:
            nvml_note = f"NVML: {error}"
        else:
            nics, nic_capacity, nic_notes = _nics(Path(sysfs_root))
            topology = replace(found.topology, nic_capacity=nic_capacity or defaults.nic_capacity)
            notes = found.notes + nic_notes
            if not nic_capacity:
                notes += (f"no NIC line rate found; nic_capacity assumed {defaults.nic_capacity:g}",)
            return replace(found, topology=topology, nics=nics, notes=notes)
    try:
        found = discover_sysfs(sysfs_root, defaults)
    except TopologyError as error:
        if nvml_note:
            raise TopologyError(f"{error}; {nvml_note}") from None
        raise
    return replace(found, notes=((nvml_note,) if nvml_note else ()) + found.notes)


def discover_sysfs(
    sysfs_root: str | os.PathLike[str] = "/sys", defaults: NodeTopology | None = None
) -> Discovery:
    """The topology from the PCIe tree in sysfs (see the module docstring)."""
    defaults = defaults or NodeTopology()
    root = Path(sysfs_root)
    devices = root / "bus" / "pci" / "devices"
    if not devices.is_dir():
        raise TopologyError(f"{devices}: no such directory; is {root} a sysfs mount?")
    gpus = sorted(
        entry.name
        for entry in devices.iterdir()
        if _read(entry / "vendor") == NVIDIA_VENDOR
        and (_read(entry / "class") or "").startswith("0x03")
    )
    if not gpus:
        raise TopologyError(
            f"{devices}: no NVIDIA GPU (vendor {NVIDIA_VENDOR}, display class 0x03) on this node"
        )
    notes: list[str] = []
    uplinks: list[str] = []
    for gpu in gpus:
        chain = _pci_chain(devices / gpu)
        # chain[0] is the device on the root port's link (a switch's upstream port or the GPU).
        uplinks.append(chain[0])
    groups = _contiguous_groups(uplinks, gpus)
    switch_numa = []
    capacities = []
    for uplink in groups:
        members = [g for g, u in zip(gpus, uplinks, strict=True) if u == uplink]
        numa = _read(devices / members[0] / "numa_node")
        switch_numa.append(max(int(numa), 0) if numa and _is_int(numa) else 0)
        capacity = _link_capacity(devices / uplink)
        if capacity is None:
            notes.append(f"{uplink}: no PCIe link speed/width; switch capacity assumed")
        capacities.append(capacity)
    known = [c for c in capacities if c is not None]
    switch_capacity = min(known) if known else defaults.pcie_switch_capacity
    if len(set(known)) > 1:
        notes.append("switch uplinks differ; the slowest is used for every switch")
    nics, nic_capacity, nic_notes = _nics(root)
    notes.extend(nic_notes)
    if not nic_capacity:
        notes.append(f"no NIC line rate found; nic_capacity assumed {defaults.nic_capacity:g}")
    topology = _node_topology(
        tuple(uplinks.count(u) for u in groups),
        switch_numa,
        switch_capacity,
        nic_capacity or defaults.nic_capacity,
        defaults,
        notes,
    )
    return Discovery(topology, "sysfs", tuple(gpus), tuple(groups), nics, tuple(notes))


def _node_topology(
    gpus_per_switch: tuple[int, ...],
    switch_numa: list[int],
    switch_capacity: float,
    nic_capacity: float,
    defaults: NodeTopology,
    notes: list[str],
) -> NodeTopology:
    """The discovered layout with the default host DRAM bandwidth, which no node reports (said
    in ``notes``)."""
    notes.append(f"dram_capacity not discoverable; assumed {defaults.dram_capacity:g} byte/s")
    return NodeTopology(
        gpus_per_switch=gpus_per_switch,
        switch_numa=tuple(switch_numa),
        pcie_switch_capacity=switch_capacity,
        dram_capacity=defaults.dram_capacity,
        nic_capacity=nic_capacity,
    )


def discover_nvml(defaults: NodeTopology | None = None) -> Discovery:
    """The GPU part of the topology from NVML (pynvml); NIC capacity is left at the default.

    Raises :class:`~bayes_sched.topology.TopologyError` when NVML cannot be loaded or
    initialised, or reports no GPU.
    """
    import pynvml

    defaults = defaults or NodeTopology()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise TopologyError(f"cannot initialise NVML ({error})") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise TopologyError("NVML reports no GPU on this node")
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        addresses = [_nvml_text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
        addresses = [a[4:] if len(a) == 16 else a for a in addresses]  # 8-digit domain -> 4
        group_of = list(range(count))
        for i in range(count):
            for j in range(i):
                level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                if level <= NVML_TOPOLOGY_MULTIPLE:
                    group_of[i] = group_of[j]
                    break
        leaders = [addresses[g] for g in group_of]
        groups = _contiguous_groups(leaders, addresses)
        notes: list[str] = []
        switch_numa, capacities = [], []
        for leader in groups:
            handle = handles[addresses.index(leader)]
            try:
                switch_numa.append(max(int(pynvml.nvmlDeviceGetNumaNodeId(handle)), 0))
            except pynvml.NVMLError as error:
                notes.append(f"{leader}: NUMA node unknown ({error}); 0 assumed")
                switch_numa.append(0)
            try:
                generation = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
                width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
                rate = LANE_BYTES_PER_S[GENERATION_GT_S[int(generation)]]
                capacities.append(2.0 * rate * int(width))
            except (pynvml.NVMLError, KeyError) as error:
                notes.append(f"{leader}: PCIe link unknown ({error!r}); capacity assumed")
        switch_capacity = min(capacities) if capacities else defaults.pcie_switch_capacity
        topology = _node_topology(
            tuple(leaders.count(leader) for leader in groups),
            switch_numa,
            switch_capacity,
            defaults.nic_capacity,
            defaults,
            notes,
        )
        return Discovery(topology, "nvml", tuple(addresses), tuple(groups), (), tuple(notes))
    except pynvml.NVMLError as error:
        raise TopologyError(f"NVML query failed ({error})") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _pci_chain(entry: Path) -> list[str]:
    """PCI addresses from the root port's child down to ``entry`` (its resolved sysfs path)."""
    resolved = Path(os.path.realpath(entry))
    chain = [part for part in resolved.parts if _PCI_ADDRESS.match(part)]
    if not chain:
        raise TopologyError(f"{entry}: resolves to {resolved}, not a PCI device path")
    # The first address is the root port itself; the device on its link is the next one.
    return chain[1:] if len(chain) > 1 else chain


def _contiguous_groups(labels: list[str], gpus: list[str]) -> list[str]:
    """Distinct labels in order; an error if a label's GPUs are not consecutive."""
    groups: list[str] = []
    for label, gpu in zip(labels, gpus, strict=True):
        if groups and groups[-1] == label:
            continue
        if label in groups:
            raise TopologyError(
                f"GPU {gpu} shares a PCIe switch ({label}) with GPUs that are not next to it in "
                "device order; gpus_per_switch cannot describe this layout: write the topology "
                "file by hand"
            )
        groups.append(label)
    return groups


def _link_capacity(device: Path) -> float | None:
    """Both-directions byte/s of a device's PCIe link from ``max_link_speed``/``max_link_width``."""
    speed = _read(device / "max_link_speed")
    width = _read(device / "max_link_width")
    if not speed or not width or not _is_int(width):
        return None
    match = re.match(r"([0-9.]+)\s*GT/s", speed)
    if match is None:
        return None
    rate = LANE_BYTES_PER_S.get(float(match.group(1)))
    return None if rate is None else 2.0 * rate * int(width)


def _nics(root: Path) -> tuple[tuple[str, ...], float, tuple[str, ...]]:
    """Physical NICs (names), their summed line rate in byte/s (0 if unknown), and notes."""
    names: list[str] = []
    total = 0.0
    notes: list[str] = []
    infiniband = root / "class" / "infiniband"
    if infiniband.is_dir():
        for hca in sorted(infiniband.iterdir()):
            if not (hca / "device").exists():
                continue
            names.append(hca.name)
            for port in sorted((hca / "ports").glob("*")):
                match = re.match(r"([0-9.]+)\s*Gb/sec", _read(port / "rate") or "")
                if match:
                    total += float(match.group(1)) * 1e9 / 8
    net = root / "class" / "net"
    if net.is_dir():
        for interface in sorted(net.iterdir()):
            if not (interface / "device").exists():
                continue  # lo, bridges, veths: no hardware behind them
            if (interface / "device" / "infiniband").is_dir():
                continue  # IPoIB on an HCA counted above
            names.append(interface.name)
            speed = _read(interface / "speed")
            if speed and _is_int(speed) and int(speed) > 0:
                total += int(speed) * 1e6 / 8
            else:
                notes.append(f"{interface.name}: link speed unknown (link down?)")
    return tuple(names), total, tuple(notes)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _is_int(text: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", text))


def _nvml_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
