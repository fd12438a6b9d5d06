"""What the learned placement policies share: their network, their weights file, and a round's
greedy decision over :class:`~bayes_sched.mechanisms.placement_steps.RoundBuilder`.

A weights file (``.pt``, loaded with ``torch.load(weights_only=True)``) holds a dict: ``format``
(:data:`WEIGHTS_FORMAT`), ``kind`` (the policy that reads it), ``obs_size``, ``num_actions``,
``hidden`` (layer width), ``max_jobs``, ``modes`` (list of ``[kind, gpu type or None]``),
``counter_nodes`` (nodes of counter or posterior features, 0 for none), ``state_dict`` and,
optionally, ``state`` (what the features beyond the job views are: :data:`STATES`; absent: a
file older than the posterior state, ``"counters"`` where ``counter_nodes`` else ``"jobs"``) and
``posterior_steps`` (the SVI steps per round of the posterior state it was trained on; the
``contention_network`` estimator's default is the shipped weights'). Beside it a JSON
sidecar records the seed, data and command that made it.

The contention world's two states (Banerjee et al., ICML 2020, and its ablation):

* ``"counters"``: :func:`counter_features`, the counters window itself, per node;
* ``"posterior"``: the contention network's posterior over each node's hidden resource use given
  that window, which the estimation stage publishes as the ``resource_use`` estimate
  (:mod:`bayes_sched.resource_use`; :mod:`bayes_sched.contention.state`): what a real scheduler
  infers from its counters, never the simulator's truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.mechanisms.placement_steps import Mode, RoundBuilder

if TYPE_CHECKING:
    import torch

    from bayes_sched.estimates import Estimates

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
                         "GPU types, GPUs per node and modes")


def state_features(state: str, counters: Any, num_nodes: int,
                   estimates: Estimates | None = None, where: str = "",
                   cluster_nodes: int | None = None) -> np.ndarray | None:
    """The features of ``state`` beyond the job views (:data:`STATES`; ``None`` for
    ``"jobs"``): :func:`counter_features` of the counters window, or the ``resource_use``
    estimate's features (:class:`~bayes_sched.resource_use.ResourceUse`), node-major. Either
    comes as ``num_nodes`` nodes' features (the node count the weights were trained on): a
    cluster of fewer nodes (``cluster_nodes``, default ``num_nodes``) is padded with zeros, as
    nodes with nothing to infer from, and the nodes past ``num_nodes`` are left out.

    Raises:
        InputError: the posterior state without a ``resource_use`` estimate (one line,
            prefixed by ``where``).
    """
    if state == "counters":
        return counter_features(counters, num_nodes)
    if state == "posterior":
        from bayes_sched.resource_use import RESOURCE_USE

        use = None if estimates is None else estimates.get(RESOURCE_USE)
        if use is None:
            raise InputError(f"{where}: the posterior state reads the 'resource_use' estimate: "
                             "expected a run with the contention_network estimator")
        features = use.features()
        per_node = features.reshape(cluster_nodes or num_nodes, -1)[:num_nodes]
        out = np.zeros((num_nodes, per_node.shape[1]), np.float32)
        out[:len(per_node)] = per_node
        return out.ravel()
    return None


def state_of(blob: dict[str, Any]) -> str:
    """A weights file's state (:data:`STATES`; see the module for files without one)."""
    return str(blob.get("state", "counters" if int(blob.get("counter_nodes", 0)) else "jobs"))


__all__ = ["COUNTER_VARIABLES", "DATA_DIR", "STATES", "WEIGHTS_FORMAT", "actor_critic",
           "check_fits", "counter_features", "greedy_round", "load_weights", "modes_of",
           "state_features", "state_of"]
