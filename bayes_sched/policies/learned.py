"""What the learned placement policies share: their network, their weights file, and a round's
greedy decision over :class:`~bayes_sched.mechanisms.placement_steps.RoundBuilder`.

A weights file (``.pt``, loaded with ``torch.load(weights_only=True)``) holds a dict: ``format``
(:data:`WEIGHTS_FORMAT`), ``kind`` (the policy that reads it), ``obs_size``, ``num_actions``,
``hidden`` (layer width), ``max_jobs``, ``modes`` (list of ``[kind, gpu type or None]``),
``counter_nodes`` (nodes of counter or posterior features, 0 for none), ``state_dict`` and,
optionally, ``state`` (what the features beyond the job views are: :data:`STATES`; absent: a
file older than the posterior state, ``"counters"`` where ``counter_nodes`` else ``"jobs"``) and
``posterior_steps`` (the SVI steps of the posterior features it was trained on). Beside it a JSON
sidecar records the seed, data and command that made it.

The contention world's two states (Banerjee et al., ICML 2020, and its ablation):

* ``"counters"``: :func:`counter_features`, the counters window itself, per node;
* ``"posterior"``: :func:`posterior_features`, the contention network's posterior
  (:mod:`bayes_sched.contention`) over each node's hidden resource use given that window: what a
  real scheduler infers from its counters, never the simulator's truth.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.mechanisms.placement_steps import Mode, RoundBuilder

if TYPE_CHECKING:
    import torch

    from bayes_sched.topology import NodeTopology

#: The weights format this code reads.
WEIGHTS_FORMAT = 1
#: Shipped weights.
DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "learned"
#: Initial bias of the stop action's logit (see :func:`actor_critic`).
STOP_PRIOR = -3.0
#: Counters the counter features read, per node: mean over the window.
COUNTER_VARIABLES = ("gpu_gpm_pcie_tx_rate", "gpu_gpm_pcie_rx_rate", "gpu_utilization")
#: What a weights file's features beyond the job views are (see the module).
STATES = ("jobs", "counters", "posterior")
#: SVI steps of the posterior features' per-round fit (see :func:`posterior_features`).
POSTERIOR_STEPS = 20
#: Posterior draws the posterior features summarise.
POSTERIOR_DRAWS = 64
#: Counter samples of the latest round the posterior features average over (the contention
#: law's samples per round).
POSTERIOR_RECENT = 6


def actor_critic(obs_size: int, num_actions: int, hidden: int = 64) -> torch.nn.Module:
    """The actor-critic network: a shared two-layer tanh trunk, then ``num_actions`` logits and
    one value (output shape ``(batch, num_actions + 1)``, the value last). The stop action's
    logit (the last action) starts at :data:`STOP_PRIOR`: a work-conserving prior, so that an
    untrained actor places what fits and leaving GPUs idle is something it has to learn."""
    import torch

    head = torch.nn.Linear(hidden, num_actions + 1)
    with torch.no_grad():
        head.bias[num_actions - 1] = STOP_PRIOR
    return torch.nn.Sequential(
        torch.nn.Linear(obs_size, hidden), torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), head)


def load_weights(path: str | Path, kind: str) -> tuple[dict[str, Any], torch.nn.Module]:
    """The weights file ``path`` (see the module) for policy ``kind`` and its network.

    Raises:
        InputError: a missing or unreadable file, another format or kind, or a state that does
            not fit the network (one line naming the file).
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such weights file; expected one made by "
                         "experiments/train_learned.py")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unpickling failure is a corrupt file
        raise InputError(f"{path}: not a weights file ({type(error).__name__}); expected "
                         "one made by experiments/train_learned.py") from None
    if not isinstance(blob, dict) or blob.get("format") != WEIGHTS_FORMAT:
        found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise InputError(f"{path}: weights format {found!r}: expected {WEIGHTS_FORMAT}; retrain "
                         "with experiments/train_learned.py")
    if blob.get("kind") != kind:
        raise InputError(f"{path}: weights of {blob.get('kind')!r}: expected {kind!r}")
    net = actor_critic(int(blob["obs_size"]), int(blob["num_actions"]), int(blob["hidden"]))
    try:
        net.load_state_dict(blob["state_dict"])
    except (RuntimeError, KeyError) as error:
        raise InputError(f"{path}: weights do not fit the network: "
                         f"{str(error).splitlines()[0]}") from None
    net.eval()
    return blob, net


def modes_of(blob: dict[str, Any]) -> tuple[Mode, ...]:
    return tuple((str(kind), None if t is None else str(t)) for kind, t in blob["modes"])


def counter_features(counters: Any, num_nodes: int) -> np.ndarray:
    """Per node, the mean over the counter window (time and GPUs) of each of
    :data:`COUNTER_VARIABLES` (rates in MB/s), log1p-scaled; zeros where no counter was emitted
    yet. ``counters``: a :class:`~bayes_sched.cluster.ClusterState`'s counters window (or
    ``None``). Shape ``(num_nodes * len(COUNTER_VARIABLES),)``."""
    out = np.zeros((num_nodes, len(COUNTER_VARIABLES)), np.float32)
    if counters is None:
        return out.ravel()
    for k, name in enumerate(COUNTER_VARIABLES):
        if name not in counters:
            continue
        values = counters[name]
        other = [d for d in values.dims if d != "node"]
        mean = np.asarray(values.mean(dim=other, skipna=True).values if other
                          else values.values, float)[:num_nodes]
        scaled = mean / 1e6 if "rate" in name else mean
        out[:len(scaled), k] = np.log1p(np.clip(np.nan_to_num(scaled), 0.0, None))
    return out.ravel()


def posterior_size(topology: NodeTopology) -> int:
    """Posterior features per node: a mean and a spread for each PCIe switch, host DRAM, the NIC
    and the GPUs' mean SM use."""
    return 2 * (topology.num_switches + 3)


def posterior_features(counters: Any, num_nodes: int, topology: NodeTopology,
                       steps: int = POSTERIOR_STEPS, seed: int = 0) -> np.ndarray:
    """The contention network's posterior over each node's hidden resource use, from the counters
    window alone (Banerjee et al.'s state).

    The window (``counters``: a :class:`~bayes_sched.cluster.ClusterState`'s counters, or
    ``None``) goes through :func:`~bayes_sched.contention.inference.prepare` (every node of
    ``topology``) and a short, seeded SVI fit (``steps`` steps from the data,
    :func:`~bayes_sched.contention.inference.fit_svi`; the fit is run once per decision round,
    so it is short: its convergence warning is silenced), then
    :func:`~bayes_sched.contention.inference.resource_utilization` over
    :data:`POSTERIOR_DRAWS` draws. Per node, for each PCIe switch, host DRAM, the NIC and the mean
    over GPUs of SM use: the posterior mean and standard deviation of load over capacity
    (fractions) averaged over the window's last :data:`POSTERIOR_RECENT` samples. Shape
    ``(num_nodes * posterior_size(topology),)``, node-major; zeros where there are no counters
    yet or no finite sample to infer from.
    """
    per_node = posterior_size(topology)
    out = np.zeros((num_nodes, per_node), np.float32)
    if counters is None:
        return out.ravel()
    from bayes_sched.contention.inference import fit_svi, prepare, resource_utilization
    from counters.errors import CountersError

    try:
        window = prepare(counters, topology, where="counters window")
    except CountersError:
        return out.ravel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draws = fit_svi(window, num_steps=steps, num_samples=POSTERIOR_DRAWS, seed=seed)
    load = resource_utilization(draws, window)[:, -POSTERIOR_RECENT:].mean(1).numpy()
    nodes = min(num_nodes, load.shape[1])
    shared = topology.num_switches + 2  # switches, DRAM, NIC; then one column per GPU's SMs
    per_draw = np.concatenate([load[:, :nodes, :shared],
                               load[:, :nodes, shared:].mean(-1, keepdims=True)], axis=-1)
    out[:nodes, 0::2] = per_draw.mean(0)
    out[:nodes, 1::2] = per_draw.std(0)
    return np.nan_to_num(out).ravel()


def greedy_round(net: torch.nn.Module, builder: RoundBuilder) -> RoundBuilder:
    """Place jobs by the network's most likely possible action until it stops or nothing more
    fits; returns ``builder`` (its :attr:`~RoundBuilder.allocations` are the decision)."""
    import torch

    with torch.no_grad():
        while builder.can_place():
            obs = torch.as_tensor(np.clip(builder.observation(), 0.0, 100.0))[None]
            logits = net(obs)[0, :-1].numpy()
            logits = np.where(builder.mask(), logits, -np.inf)
            action = int(np.argmax(logits))
            if action == builder.stop:
                break
            builder.place(action)
    return builder


def check_fits(blob: dict[str, Any], builder: RoundBuilder, path: str | Path,
               types: Sequence[str]) -> None:
    """Refuse a cluster the weights were not made for (one line naming the file)."""
    size = builder.observation().size
    if size != int(blob["obs_size"]) or builder.num_actions != int(blob["num_actions"]):
        raise InputError(f"{path}: weights for {blob['obs_size']} observations and "
                         f"{blob['num_actions']} actions; this cluster ({', '.join(types)}) gives "
                         f"{size} and {builder.num_actions}: expected weights trained for its "
                         "GPU types and modes")


def state_features(state: str, counters: Any, num_nodes: int, topology: NodeTopology,
                   steps: int = POSTERIOR_STEPS) -> np.ndarray | None:
    """The features of ``state`` beyond the job views (:data:`STATES`; ``None`` for
    ``"jobs"``), from a counters window (see :func:`counter_features`,
    :func:`posterior_features`)."""
    if state == "counters":
        return counter_features(counters, num_nodes)
    if state == "posterior":
        return posterior_features(counters, num_nodes, topology, steps)
    return None


def state_size(state: str, num_nodes: int, topology: NodeTopology) -> int:
    """Length of :func:`state_features` of ``state``."""
    if state == "counters":
        return num_nodes * len(COUNTER_VARIABLES)
    if state == "posterior":
        return num_nodes * posterior_size(topology)
    return 0


def state_of(blob: dict[str, Any]) -> str:
    """A weights file's state (:data:`STATES`; see the module for files without one)."""
    return str(blob.get("state", "counters" if int(blob.get("counter_nodes", 0)) else "jobs"))


__all__ = ["COUNTER_VARIABLES", "DATA_DIR", "POSTERIOR_DRAWS", "POSTERIOR_RECENT",
           "POSTERIOR_STEPS", "STATES", "WEIGHTS_FORMAT", "actor_critic", "check_fits",
           "counter_features", "greedy_round", "load_weights", "modes_of", "posterior_features",
           "posterior_size", "state_features", "state_of", "state_size"]
