"""What one decision's genetic searches cost at a scale (Pollux: one NSGA-II search; bo: its
elitist search and Pollux's under the avoid rule), and the part no rewrite of their array code can
remove while the decisions stay the same.

A round of ``bench_scale``'s synthetic cluster (``--case``, default 64 GPUs x 160 jobs) is run
under ``--policy`` to round ``--round`` and the searches' inputs there are kept; then, on copies
of them:

* the search's CPU time (the least of ``--repeats``);
* its calls per generation: C functions called (numpy's and the generator's) and Python
  functions (numpy's wrappers included), counted with ``sys.setprofile``;
* the CPU time of the random draws alone: the same calls to the generator, with the same
  arguments, in the same order (the same seeds must give the same decisions, so these draws are
  the least any implementation makes);
* the CPU time of one small numpy call (``a.sum()`` on 100 elements), the cost of a call itself.

    python experiments/bench_search_floor.py --case scale-64
    python experiments/bench_search_floor.py --case scale-1024 --policy bo
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale  # noqa: E402

from bayes_sched.mechanisms.genetic_allocation import search as allocation  # noqa: E402
from bayes_sched.tables import print_table  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402


class _RecordingGenerator:
    """A generator's stand-in that records every call (name, arguments) and passes it on."""

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.generator, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, copy.deepcopy(args), copy.deepcopy(kwargs)))
            return method(*args, **kwargs)
        return call


#: Searches per decision.
SEARCHES_PER_DECISION = {"pollux": 1, "bo": 2}


def captured_searches(case: str, policy: str, at_round: int) -> list[tuple[Any, Any, list[str]]]:
    """Each search of the decision of round ``at_round``: the search, its problem and the job
    names as they stand then."""
    kept: list[tuple[Any, Any, list[str]]] = []
    evolve = allocation.GeneticSearch.evolve_sparse

    def capture(self: Any, problem: Any, names: list[str]) -> Any:
        if len(kept) < at_round * SEARCHES_PER_DECISION[policy]:
            kept.append(copy.deepcopy((self, problem, names)))
        return evolve(self, problem, names)

    allocation.GeneticSearch.evolve_sparse = capture  # type: ignore[method-assign]
    try:
        bench_scale.scale_worker(case, [policy], at_round, 0)
    finally:
        allocation.GeneticSearch.evolve_sparse = evolve  # type: ignore[method-assign]
    return kept[-SEARCHES_PER_DECISION[policy]:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(bench_scale.SCALE), default="scale-64")
    parser.add_argument("--policy", choices=sorted(SEARCHES_PER_DECISION), default="pollux")
    parser.add_argument("--round", type=int, default=3, help="the round whose search is timed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    states = captured_searches(args.case, args.policy, args.round)

    def fresh(state: tuple[Any, Any, list[str]]) -> tuple[Any, Any, list[str]]:
        search, problem, names = copy.deepcopy(state)
        problem.rng = search.rng
        return search, problem, names

    def run_all() -> float:
        """CPU seconds of every search of the decision, each on fresh copies."""
        total = 0.0
        for state in states:
            search, problem, names = fresh(state)
            start = time.process_time()
            search.evolve_sparse(problem, names)
            total += time.process_time() - start
        return total

    times = [run_all() for _ in range(args.repeats)]
    counts: Counter[str] = Counter()

    def count(frame: Any, event: str, arg: Any) -> None:
        counts[event] += 1

    generations = 0
    recorders = []
    for state in states:
        search, problem, names = fresh(state)
        size = int(np.clip(search.ga.max_elements // problem.base.size,
                           search.ga.min_population, search.ga.population))
        generations += max(search.ga.min_generations,
                           search.ga.generations * size // search.ga.population)
        sys.setprofile(count)
        search.evolve_sparse(problem, names)
        sys.setprofile(None)
        search, problem, names = fresh(state)
        recorder = _RecordingGenerator(search.rng)
        search.rng = problem.rng = recorder
        search.evolve_sparse(problem, names)
        recorders.append((state[0].rng, recorder))
    draws = []
    for _ in range(args.repeats):
        total = 0.0
        for original, recorder in recorders:
            generator = copy.deepcopy(original)
            start = time.process_time()
            for name, call_args, kwargs in recorder.calls:
                getattr(generator, name)(*call_args, **kwargs)
            total += time.process_time() - start
        draws.append(total)
    small = np.arange(100)
    start = time.process_time()
    for _ in range(20_000):
        small.sum()
    per_call = (time.process_time() - start) / 20_000
    jobs, nodes = states[0][1].base.shape
    row = {
        "case": args.case, "policy": args.policy, "jobs": jobs, "nodes": nodes,
        "searches": len(states), "generations": generations,
        "search_cpu_ms": 1e3 * min(times),
        "c_calls_per_generation": counts["c_call"] / generations,
        "python_calls_per_generation": counts["call"] / generations,
        "draw_calls": sum(len(r.calls) for _, r in recorders),
        "draws_alone_cpu_ms": 1e3 * min(draws),
        "small_numpy_call_us": 1e6 * per_call,
    }
    print_table([row], title="one decision's searches (CPU time; load-insensitive)",
                as_json=args.json)
    if args.record:
        record_results(__file__, {"one decision's searches": [row]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
