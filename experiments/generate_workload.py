"""Generate a long workload as the shipped Pollux workloads are drawn, and write it as a CSV.

Windows of 8 hours, each with an equal share of the jobs; every job one row drawn (seeded, with
replacement) from the shipped workloads 1-8: its application, GPUs, batch size and its time within
the window (:func:`bayes_sched.sim.workload.generate_workload`). The scale benchmark's trace:

    python experiments/generate_workload.py --jobs 960 --hours 48 --seed 0 --out trace-960.csv
    bayes-sched simulate --workload trace-960.csv --policy pollux
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayes_sched.errors import InputError  # noqa: E402
from bayes_sched.sim.workload import (  # noqa: E402
    WORKLOAD_SETS,
    generate_workload,
    write_workload,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=960, help="jobs in all (default 960)")
    parser.add_argument("--hours", type=int, default=48,
                        help="length, a multiple of 8 hours (default 48)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    parser.add_argument("--set", default="workloads", choices=WORKLOAD_SETS,
                        help="the shipped set drawn from (default: workloads, job load 1.0)")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    args = parser.parse_args(argv)
    try:
        workload = generate_workload(args.jobs, args.hours, args.seed, args.set)
        write_workload(workload, args.out)
    except (InputError, OSError) as error:
        print(f"generate_workload: {error}", file=sys.stderr)
        return 2
    mix = Counter(job.application for job in workload.jobs)
    print(f"{args.out}: {len(workload)} jobs over {args.hours} h (last at "
          f"{workload.jobs[-1].submit_time / 3600:.1f} h); "
          + ", ".join(f"{app} {count}" for app, count in mix.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
