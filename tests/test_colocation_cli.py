"""``bayes-sched infer solo-features`` and ``infer interference --model gp`` as the co-location
guide (docs/guide/contention.md) shows them, on counter logs and pairs written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

#: Each job's GPU and memory utilisation (percent) and memory used (MiB) while it ran alone.
SOLO_RUNS = {"resnet": (95, 60, 9000), "lm": (55, 20, 3000), "a3c": (20, 5, 1200)}
#: Measured pairs: the busier the neighbour, the slower; a3c next to itself runs faster than alone.
PAIRS = """job_a,job_b,speed_a,speed_b
resnet,lm,0.62,0.71
resnet,a3c,0.91,0.55
lm,a3c,0.93,0.80
resnet,resnet,0.51,0.52
lm,lm,0.74,0.73
a3c,a3c,1.04,1.03
"""


def _smi_log(gpu: int, memory: int, used: int) -> str:
    rows = ["2026/12/06 04:00:00.000, 0, 0 %, 0 %, 300 MiB"]   # start-up, then steady state
    rows += [f"2026/12/06 04:00:0{i + 1}.000, 0, {gpu + d} %, {memory + d} %, {used} MiB"
             for i, d in enumerate((1, 0, -1, 2))]
    return ("timestamp, index, utilization.gpu [%], utilization.memory [%], memory.used [MiB]\n"
            + "\n".join(rows) + "\n")


def _run(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayes_sched", *command.split()[1:]],
                          capture_output=True, text=True, env=ENV, cwd=folder, timeout=300)


def test_the_guides_colocation_commands_run_on_logs_and_pairs(tmp_path: Path) -> None:
    for job, counters in SOLO_RUNS.items():
        (tmp_path / f"{job}.csv").write_text(_smi_log(*counters))
    (tmp_path / "pairs.csv").write_text(PAIRS)
    made = _run(tmp_path, "bayes-sched infer solo-features --log resnet=resnet.csv "
                          "--log lm=lm.csv --log a3c=a3c.csv --out solo.csv")
    assert made.returncode == 0, made.stderr
    solo = (tmp_path / "solo.csv").read_text().splitlines()
    assert solo[0] == "job,gpu_util,mem_util,mem_used_gib"
    assert solo[1].startswith("resnet,0.95,") and len(solo) == 4   # medians, start-up row out
    shown = "bayes-sched infer interference pairs.csv solo.csv --jobs resnet,lm --model gp"
    predicted = _run(tmp_path, shown + " --json")
    assert predicted.returncode == 0, predicted.stderr
    rows = {r["job"]: r for r in json.loads(predicted.stdout)}
    assert set(rows) == {"resnet", "lm"}
    for row in rows.values():
        assert row["speed_lower_90"] < row["speed_median"] < row["speed_upper_90"]
    # resnet next to lm was measured at 0.62, lm next to resnet at 0.71.
    assert abs(rows["resnet"]["speed_median"] - 0.62) < 0.1
    assert abs(rows["lm"]["speed_median"] - 0.71) < 0.1


def test_censored_gp_reads_capped_pairs_and_refuses_uncapped_ones(tmp_path: Path) -> None:
    # The same pairs as recorded capped at 1 (a3c next to itself ran faster than alone).
    for job, counters in SOLO_RUNS.items():
        (tmp_path / f"{job}.csv").write_text(_smi_log(*counters))
    (tmp_path / "pairs.csv").write_text(PAIRS.replace("1.04,1.03", "1.0,1.0"))
    made = _run(tmp_path, "bayes-sched infer solo-features --log resnet=resnet.csv "
                          "--log lm=lm.csv --log a3c=a3c.csv --out solo.csv")
    assert made.returncode == 0, made.stderr
    predicted = _run(tmp_path, "bayes-sched infer interference pairs.csv solo.csv --jobs a3c,a3c "
                               "--model gp-censored --json")
    assert predicted.returncode == 0, predicted.stderr
    rows = json.loads(predicted.stdout)
    # Censored at 1, a3c next to itself is predicted at or above 1, not pulled below it.
    assert all(row["speed_median"] >= 0.99 for row in rows)
    (tmp_path / "pairs.csv").write_text(PAIRS)
    refused = _run(tmp_path, "bayes-sched infer interference pairs.csv solo.csv --jobs resnet,lm "
                             "--model gp-censored")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "pairs.csv: speed_a 1.04 of the pair a3c,a3c" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_colocation_commands_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text(_smi_log(50, 10, 100).replace("10 %", "[N/A]", 1))
    (tmp_path / "pairs.csv").write_text(PAIRS)
    cases = [
        ("bayes-sched infer solo-features --log a.csv --out s.csv", "expected JOB=FILE"),
        ("bayes-sched infer solo-features --log a=missing.csv --out s.csv", "--log: missing.csv"),
        ("bayes-sched infer solo-features --log a=a.csv --out s.csv",
         "a.csv: row 4, column 'utilization.memory [%]'"),
        ("bayes-sched infer interference pairs.csv pairs.csv --jobs resnet,lm,a3c --model gp",
         "expected two jobs"),
        ("bayes-sched infer interference pairs.csv pairs.csv --jobs resnet,lm --model gp "
         "--steps 10", "--steps: an SVI setting"),
    ]
    for command, expected in cases:
        result = _run(tmp_path, command)
        assert result.returncode == 2, (command, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
