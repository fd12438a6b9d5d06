"""Train a learned placement policy on a world's environment and write its weights, a JSON sidecar
(seed, environment, settings, command, learning curve, CPU seconds) and a learning-curve plot.

    python experiments/train_learned.py --policy harmony --world pollux --episodes 150 \\
        --out bayes_sched/data/learned/harmony-pollux.pt

``--policy harmony`` trains with Harmony's heuristic exploration, replay and reward model;
``banerjee`` without them, on the contention world (``--world contention``) with ``--state
posterior`` (the contention network's posterior over hidden resource use, Banerjee et al.'s state;
``--posterior-steps`` SVI steps per decision round) or ``--state counters`` (the raw counters,
the paper's ablation):

    python experiments/train_learned.py --policy banerjee --world contention --state posterior \
        --episodes 40 --out bayes_sched/data/learned/banerjee-contention-posterior.pt

Training
and evaluation episodes come from different seeds (the environment draws each episode's jobs from
its seed: training seeds ``seed * 100003 + episode``, evaluation seeds 10001-10003, the benchmark's
held-out seeds 20001-20003). Bad flags: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.contention.state import POSTERIOR_DRAWS, POSTERIOR_RECENT, POSTERIOR_STEPS
from bayes_sched.errors import InputError
from bayes_sched.gym import make_env
from bayes_sched.gym.train import TrainConfig, random_return, train
from bayes_sched.policies.learned import COUNTER_VARIABLES, WEIGHTS_FORMAT

#: Environment sizes per world (the weights' training data).
ENV_OPTIONS: dict[str, dict[str, object]] = {
    "gavel": {"num_jobs": 12, "arrival_hours": 1.0, "cluster": "v100:4,p100:4,k80:4"},
    "pollux": {"num_jobs": 8, "arrival_hours": 1.0, "cluster": "4x4:t4"},
    "contention": {"num_jobs": 8, "arrival_hours": 1.0, "cluster": "4x4:t4"},
    # Where co-location interference occurs: three times the jobs in the same hour on the same
    # cluster, the artifact's rule for distributed jobs sharing a node and Gavel's measured
    # pairs for any node sharing (pollux_env's hidden "gavel" law).
    "pollux-pairs": {"num_jobs": 24, "arrival_hours": 1.0, "cluster": "4x4:t4",
                     "hidden": "gavel"},
}
#: The environment (:data:`bayes_sched.gym.ENVIRONMENTS`) of each --world preset.
ENV_WORLD = {"gavel": "gavel", "pollux": "pollux", "contention": "contention",
             "pollux-pairs": "pollux"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", choices=("harmony", "banerjee"), required=True)
    parser.add_argument("--world", choices=tuple(ENV_OPTIONS), required=True)
    parser.add_argument("--episodes", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--state", choices=("counters", "posterior"), default="counters",
                        help="the contention world's state (--world contention only)")
    parser.add_argument("--posterior-steps", type=int, default=POSTERIOR_STEPS,
                        help="SVI steps of the posterior per decision round (--state posterior)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not 1 <= args.episodes <= 100_000:
        print(f"--episodes {args.episodes}: expected 1 to 100000", file=sys.stderr)
        return 2
    if args.world != "contention" and args.state != "counters":
        print(f"--state {args.state}: only --world contention has a counters state",
              file=sys.stderr)
        return 2
    options = dict(ENV_OPTIONS[args.world])
    if args.world == "contention":
        options.update(state=args.state, posterior_steps=args.posterior_steps)
    config = TrainConfig(episodes=args.episodes, harmony=args.policy == "harmony",
                         eval_every=max(args.episodes // 10, 1), seed=args.seed)
    # The commit the training ran from (read before it: a commit made meanwhile is not it).
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, check=False).stdout.strip()
    try:
        result = train(lambda: make_env(ENV_WORLD[args.world], **options), config, log=print)
    except InputError as error:
        print(error, file=sys.stderr)
        return 2
    env = make_env(ENV_WORLD[args.world], **options)
    modes = [list(m) for m in env.modes]
    counter_nodes = (load_cluster_spec(str(options["cluster"])).num_nodes
                     if args.world == "contention" else 0)
    state = args.state if counter_nodes else "jobs"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": WEIGHTS_FORMAT, "kind": args.policy,
                "obs_size": env.obs_size,
                "num_actions": env.num_actions, "hidden": config.hidden,
                "max_jobs": env.max_jobs, "modes": modes, "counter_nodes": counter_nodes,
                "state": state, "posterior_steps": args.posterior_steps,
                "state_dict": result.net.state_dict()}, args.out)
    sidecar = {
        "policy": args.policy, "world": args.world, "env": options, "seed": args.seed,
        "train_config": {k: v for k, v in vars(config).items()},
        "state": state,
        "counter_variables": list(COUNTER_VARIABLES) if counter_nodes else [],
        "posterior": ({"svi_steps": args.posterior_steps, "draws": POSTERIOR_DRAWS,
                       "recent_samples": POSTERIOR_RECENT} if state == "posterior" else None),
        "command": "python experiments/train_learned.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "git_rev": rev, "cpu_seconds": round(result.cpu_seconds, 1),
        "kept_episode": result.kept_episode,
        "curve": [{"episodes": e, "greedy_return_eval": round(r, 4)} for e, r in result.curve],
        "random_return_eval": round(random_return(env, config.eval_seeds), 4),
        "training_returns": [round(r, 4) for r in result.returns],
    }
    args.out.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n")
    _plot(result.curve, sidecar["random_return_eval"], args.out.with_suffix(".png"),
          f"{args.policy} on {args.world}, {state} state (seed {args.seed})")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), its .json and .png; "
          f"CPU {result.cpu_seconds:.0f} s")
    return 0


def _plot(curve: list[tuple[int, float]], random: float, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([e for e, _ in curve], [r for _, r in curve], marker="o", label="greedy (eval)")
    ax.axhline(random, color="grey", linestyle="--", label="random possible actions")
    ax.set_xlabel("training episodes")
    ax.set_ylabel("return (minus job-hours)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
