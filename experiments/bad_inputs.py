"""The bad-input corpus of issue 14: hundreds of hostile inputs to every ``bayes-sched`` sub-command.

Each case runs the real command line in a subprocess (with a timeout) on a file this script writes
into a temporary folder (binary, UTF-16, byte-order marks, huge integers, NaN, deep JSON, extra
fields, folders given as files, damaged counters stores, ...) or on a bad option, and is classed:

- ``traceback``: stderr holds a Python traceback;
- ``hang``: the command ran past the timeout (a case that needs a fit to fail is a bug too);
- ``internal error``: the CLI's guard caught an unexpected exception (exit 1, a bug);
- ``exit 0``: the command accepted the nonsense;
- ``bad message``: it failed, but not as promised: not one line on stderr, a wrong exit status,
  or a message without the case's token (the file, row, column or flag at fault);
- ``ok``.

It prints a table per sub-command and the totals (``--json`` for machine output). An audit, not a
timed test; ``tests/test_cli_bad_inputs.py`` runs the ``--quick`` subset.

    python experiments/bad_inputs.py [--only SUBCOMMAND] [--jobs N] [--timeout S] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = ("ok", "traceback", "hang", "internal error", "exit 0", "bad message")


@dataclass(frozen=True)
class Case:
    """One bad input.

    Attributes:
        command: the sub-command it exercises, as the table groups it (``"fit throughput"``).
        label: what is wrong, briefly.
        args: arguments after ``bayes-sched``; ``{dir}`` is the corpus folder (the bad files),
            ``{case}`` a fresh empty folder of this case's own (for outputs).
        token: text the error line must contain (case-insensitive): the file, row, column or flag;
            for a case expected to succeed (``status`` 0), text its output must contain.
        status: the exit status expected (2: bad input; 3: a simulation with unfinished jobs).
        item: the item of issue 14 it checks, if any.
        quick: part of the representative subset ``--quick`` runs (the pytest test).
        fresh: fixtures copied into ``{case}`` before the run (for commands that write to them).
    """

    command: str
    label: str
    args: tuple[str, ...]
    token: str
    status: int = 2
    item: str = ""
    quick: bool = False
    fresh: tuple[str, ...] = ()


@dataclass
class Result:
    """What one case did."""

    command: str
    label: str
    item: str
    outcome: str
    returncode: int | None
    seconds: float
    stderr: str
    argv: str


# ---------------------------------------------------------------------------------------------
# Fixtures: the bad (and a few good) files, written into the corpus folder.
# ---------------------------------------------------------------------------------------------

PROFILE_HEADER = "num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time"
WORKLOAD_HEADER = "name,time,application,num_replicas,batch_size"
VALIDATION_HEADER = "progress,iteration,metric,grad_sqr,grad_var"
TOPOLOGY = ('{"gpus_per_switch": [2, 2, 2, 2], "switch_numa": [0, 0, 1, 1], '
            '"pcie_switch_capacity": 24e9, "dram_capacity": 120e9, "nic_capacity": 12.5e9}')
TWO_TO_63 = str(2**63)
DIGITS_400 = "9" * 400


def _profile_rows() -> list[str]:
    rows = []
    for nodes, gpus in ((1, 1), (1, 2), (1, 4), (2, 8)):
        for m in (16, 32, 64):
            compute = 0.02 + 0.001 * m
            sync = 0.0 if gpus == 1 else (0.05 if nodes == 1 else 0.15)
            rows.append(f"{nodes},{gpus},{m},0,{compute + sync:.5f},{sync:.5f}")
    return rows


def _validation_rows() -> list[str]:
    return [f"{1000.0 * (k + 1):.1f},{100 * (k + 1)},{0.1 * k:.2f},{1.0 / (k + 1):.4f},"
            f"{2.0 + k:.4f}" for k in range(6)]


def _text_variants(header: str, rows: list[str], broken: dict[str, str]) -> dict[str, bytes]:
    """Generic damage to a CSV (encodings, emptiness, stray fields) plus ``broken`` texts."""
    good = "\n".join([header, *rows]) + "\n"
    variants: dict[str, bytes] = {
        "binary": bytes(range(256)) * 8,
        "utf16": good.encode("utf-16"),
        "latin1": good.replace(rows[0], rows[0] + "\u00e9", 1).encode("latin-1"),
        "nul-bytes": good.encode().replace(b",", b"\x00", 3),
        "empty": b"",
        "header-only": (header + "\n").encode(),
        "missing-column": ("\n".join([",".join(header.split(",")[:-1]),
                                      *(",".join(r.split(",")[:-1]) for r in rows)]) + "\n"
                           ).encode(),
        "extra-field": "\n".join([header, rows[0] + ",7", *rows[1:]]).encode() + b"\n",
        "duplicated-column": "\n".join([header + "," + header.split(",")[-1],
                                        *(r + "," + r.split(",")[-1] for r in rows)]
                                       ).encode() + b"\n",
        "short-row": "\n".join([header, ",".join(rows[0].split(",")[:2]), *rows[1:]]
                               ).encode() + b"\n",
    }
    variants.update({name: text.encode() for name, text in broken.items()})
    return variants


def _replace_cell(header: str, rows: list[str], column: str, value: str, row: int = 1) -> str:
    """The CSV with one cell replaced (``row`` counts data rows from 0)."""
    index = header.split(",").index(column)
    out = []
    for k, line in enumerate(rows):
        cells = line.split(",")
        if k == row:
            cells[index] = value
        out.append(",".join(cells))
    return "\n".join([header, *out]) + "\n"


def profile_files() -> dict[str, bytes]:
    rows = _profile_rows()

    cell = partial(_replace_cell, PROFILE_HEADER, rows)

    return _text_variants(PROFILE_HEADER, rows, {
        "text-number": cell("step_time", "oops"),
        "nan-step": cell("step_time", "nan"),
        "inf-step": cell("step_time", "inf"),
        "negative-step": cell("step_time", "-0.5"),
        "huge-step": cell("step_time", "1e300"),
        "zero-bsz": cell("local_bsz", "0"),
        "bsz-2-63": cell("local_bsz", TWO_TO_63),
        "nodes-2-63": cell("num_nodes", TWO_TO_63),
        "replicas-2-63": cell("num_replicas", TWO_TO_63),
        "accum-2-63": cell("accum_steps", TWO_TO_63),
        "bsz-400-digits": cell("local_bsz", DIGITS_400),
        "fraction-bsz": cell("local_bsz", "16.5"),
        "unknown-header": "a,b,c\n1,2,3\n",
    })


def workload_files() -> dict[str, bytes]:
    rows = ["j0,0,cifar10,1,128", "j1,30,ncf,1,32768", "j2,60,cifar10,2,256"]

    cell = partial(_replace_cell, WORKLOAD_HEADER, rows)

    files = _text_variants(WORKLOAD_HEADER, rows, {
        "unknown-app": cell("application", "gpt5"),
        "negative-time": cell("time", "-5", row=0),
        "unsorted-time": cell("time", "5", row=2),
        "nan-time": cell("time", "nan"),
        "inf-time": cell("time", "inf"),
        "duplicate-name": cell("name", "j0"),
        "empty-name": cell("name", ""),
        "zero-batch": cell("batch_size", "0"),
        "batch-2-63": cell("batch_size", TWO_TO_63),
        "replicas-2-63": cell("num_replicas", TWO_TO_63),
        "replicas-zero": cell("num_replicas", "0"),
        "fraction-replicas": cell("num_replicas", "1.5"),
        "after-horizon": cell("time", "1e10", row=2),
        "batch-1e12": "\n".join([WORKLOAD_HEADER, "j0,0,cifar10,1,1000000000000"]) + "\n",
        "replicas-1e5": "\n".join([WORKLOAD_HEADER, "j0,0,cifar10,100000,128"]) + "\n",
    })
    files["bom"] = ("\ufeff" + "\n".join([WORKLOAD_HEADER, rows[0]]) + "\n").encode()
    return files


def validation_files() -> dict[str, bytes]:
    rows = _validation_rows()

    cell = partial(_replace_cell, VALIDATION_HEADER, rows)

    return _text_variants(VALIDATION_HEADER, rows, {
        "nan-grad": cell("grad_sqr", "nan"),
        "negative-var": cell("grad_var", "-1"),
        "overflow-ratio": cell("grad_var", "1e308"),
        "text-progress": cell("progress", "soon"),
        "decreasing-progress": cell("progress", "1"),
    })


def topology_files() -> dict[str, bytes]:
    def with_field(name: str, value: str) -> bytes:
        body = json.loads(TOPOLOGY)
        body[name] = "@@"
        return json.dumps(body).replace('"@@"', value).encode()

    return {
        "binary": bytes(range(256)) * 4,
        "utf16": TOPOLOGY.encode("utf-16"),
        "empty": b"",
        "not-json": b"{gpus_per_switch: [2, 2]",
        "array": b"[1, 2, 3]",
        "deep": ("[" * 100_000 + "]" * 100_000).encode(),
        "deep-object": ('{"a":' * 50_000 + "1" + "}" * 50_000).encode(),
        "digits-400": with_field("pcie_switch_capacity", DIGITS_400),
        "string-gpus": with_field("gpus_per_switch", '"2222"'),
        "fraction-gpus": with_field("gpus_per_switch", "[1.5, 2.5, 2, 2]"),
        "bool-capacity": with_field("nic_capacity", "true"),
        "negative-capacity": with_field("dram_capacity", "-1"),
        "nan-capacity": with_field("dram_capacity", "NaN"),
        "unknown-field": with_field("colour", '"blue"'),
        "null-numa": with_field("switch_numa", "null"),
        "zero-gpus": with_field("gpus_per_switch", "[0, 0, 0, 0]"),
    }


PAIRS_HEADER = "job_a,job_b,speed_a,speed_b"
PAIRS_ROWS = ["a,b,0.8,0.7", "a,c,0.9,0.6", "b,c,0.7,0.75", "a,d,0.85,0.8"]
SOLO_HEADER = "job,util,mem"
SOLO_ROWS = ["a,0.5,0.3", "b,0.7,0.2", "c,0.3,0.6", "d,0.6,0.4"]


def pairs_files() -> dict[str, bytes]:
    cell = partial(_replace_cell, PAIRS_HEADER, PAIRS_ROWS)

    return _text_variants(PAIRS_HEADER, PAIRS_ROWS, {
        "zero-speed": cell("speed_a", "0"),
        "nan-speed": cell("speed_b", "nan"),
        "speed-3": cell("speed_a", "3"),
        "empty-job": cell("job_a", ""),
        "nan-job": cell("job_b", "nan"),
    })


def solo_files() -> dict[str, bytes]:
    cell = partial(_replace_cell, SOLO_HEADER, SOLO_ROWS)

    return _text_variants(SOLO_HEADER, SOLO_ROWS, {
        "nan-feature": cell("util", "nan"),
        "inf-feature": cell("mem", "inf"),
        "duplicate-job": cell("job", "a"),
        "no-features": "job\na\nb\n",
    })


#: Job files for ``submit``: name -> fields changed from a good job file (``None``: removed).
JOB_FILE_BAD: dict[str, dict[str, str | None]] = {
    "missing-script": {"script": '"nosuch.py"'},
    "no-script": {"script": None},
    "bsz-limit-0": {"max_local_bsz": "0"},
    "bsz-limit-text": {"max_local_bsz": '"64"'},
    "target-0": {"target_epochs": "0"},
    "target-float": {"target_epochs": "1.5"},
    "unknown-field": {"gpus": "4"},
    "max-below-init": {"max_batch_size": "8"},
    "bad-name": {"name": '"a b"'},
    "bad-tenant": {"tenant": '" vision"'},
}

# --- issue 40 (servetrust): job files the trust model and the bounds refuse -------------------
#: Job files for ``submit`` (as :data:`JOB_FILE_BAD`) -> the field the error names.
JOB_FILE_TRUST: dict[str, tuple[dict[str, str | None], str]] = {
    "env-ld-preload": ({"env": '{ LD_PRELOAD = "/tmp/x.so" }'}, "env.LD_PRELOAD"),
    "env-ld-library-path": ({"env": '{ LD_LIBRARY_PATH = "/tmp" }'}, "env.LD_LIBRARY_PATH"),
    "env-pythonpath": ({"env": '{ PYTHONPATH = "/tmp" }'}, "env.PYTHONPATH"),
    "env-rank": ({"env": '{ RANK = "3" }'}, "env.RANK"),
    "env-bad-name": ({"env": '{ "A B" = "1" }'}, "env.A B"),
    "python-missing": ({"python": '"/nonexistent/python3"'}, "python"),
    "target-huge": ({"target_epochs": "9223372036854775807"}, "target_epochs"),
    "max-batch-1e26": ({"max_batch_size": "1e26"}, "max_batch_size"),
    "max-batch-huge": ({"max_batch_size": "100000000000000000"}, "max_batch_size"),
    "init-batch-4e12": ({"init_batch_size": "4e12"}, "init_batch_size"),
    "init-batch-huge": ({"init_batch_size": "4000000000000"}, "init_batch_size"),
    "max-replicas-huge": ({"max_replicas": "1073741824"}, "max_replicas"),
}
#: Of those, the ones the quick corpus (the pytest test) runs.
JOB_FILE_TRUST_QUICK = ("env-ld-preload", "python-missing", "target-huge", "init-batch-huge")


def write_fixtures(base: Path, stores: bool) -> None:
    """Write every bad file under ``base`` (and, if ``stores``, the counters stores)."""
    groups: dict[str, tuple[dict[str, bytes], str]] = {
        "profile": (profile_files(), "csv"),
        "workload": (workload_files(), "csv"),
        "validation": (validation_files(), "csv"),
        "topology": (topology_files(), "json"),
        "pairs": (pairs_files(), "csv"),
        "solo": (solo_files(), "csv"),
    }
    for group, (files, suffix) in groups.items():
        for name, data in files.items():
            (base / f"{group}-{name}.{suffix}").write_bytes(data)
    good = {
        "profile-good.csv": "\n".join([PROFILE_HEADER, *_profile_rows()]) + "\n",
        "profile-bom.csv": "\ufeff" + "\n".join([PROFILE_HEADER, *_profile_rows()]) + "\n",
        "workload-good.csv": "\n".join([WORKLOAD_HEADER, "j0,0,cifar10,1,128"]) + "\n",
        "pairs-good.csv": "\n".join([PAIRS_HEADER, *PAIRS_ROWS]) + "\n",
        "solo-good.csv": "\n".join([SOLO_HEADER, *SOLO_ROWS]) + "\n",
        "topology-good.json": TOPOLOGY,
        "a-file.txt": "not a folder\n",
        # Gavel traces (10 tab-separated columns).
        "trace-unknown-type.trace": "NoSuchNet\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\t0\n",
        "trace-9-columns.trace": "A3C\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\n",
        "trace-steps-nan.trace": "A3C\tcmd\tdir\t-n\t1\tnan\t1\t1\t-1\t0\n",
        "trace-too-wide.trace": "A3C\tcmd\tdir\t-n\t1\t100\t64\t1\t-1\t0\n",
    }
    for name, text in good.items():
        (base / name).write_text(text, encoding="utf-8")
    (base / "train.py").write_text("raise SystemExit(0)\n")
    job = {"script": '"train.py"', "init_batch_size": "32", "max_local_bsz": "64",
           "target_epochs": "2"}
    trust = {name: change for name, (change, _) in JOB_FILE_TRUST.items()}
    for name, change in {**JOB_FILE_BAD, **trust}.items():
        fields = {**job, **change}
        lines = [f"{key} = {value}" for key, value in fields.items() if value is not None]
        (base / f"job-{name}.toml").write_text("\n".join(lines) + "\n")
    (base / "job-not-toml.toml").write_text("script = [\n")
    for name in ("profile-folder.csv", "workload-folder.csv", "pairs-folder.csv",
                 "solo-folder.csv", "topology-folder.json", "empty-folder"):
        (base / name).mkdir()
    grads = base / "grads-two-names"  # validation-128.csv and validation-0128.csv in one folder
    grads.mkdir()
    for name in ("validation-128.csv", "validation-0128.csv"):
        (grads / name).write_text("\n".join([VALIDATION_HEADER, *_validation_rows()]) + "\n")
    grads_bad = base / "grads-bad-name"
    grads_bad.mkdir()
    (grads_bad / "validation-abc.csv").write_text(
        "\n".join([VALIDATION_HEADER, *_validation_rows()]) + "\n")
    for name, data in validation_files().items():  # the reader takes B from the file's name
        folder = base / f"validation-{name}"
        folder.mkdir()
        (folder / "validation-128.csv").write_bytes(data)
    (base / "validation-good").mkdir()
    (base / "validation-good" / "validation-128.csv").write_text(
        "\n".join([VALIDATION_HEADER, *_validation_rows()]) + "\n")
    (base / "validation-zero").mkdir()
    (base / "validation-zero" / "validation-0.csv").write_text(
        "\n".join([VALIDATION_HEADER, *_validation_rows()]) + "\n")
    write_state_fixtures(base)  # issue 40, item 4: see the block at the end
    write_bounds_fixtures(base)
    if stores:
        write_stores(base)


def write_stores(base: Path) -> None:
    """A healthy synthetic store (written by the CLI itself) and damaged copies of it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "bayes_sched", "infer", "synthetic", str(base / "syn"),
                    "--nodes", "1", "--samples", "20"], check=True, env=env,
                   capture_output=True, timeout=300)
    healthy = base / "syn" / "node000"
    shutil.copytree(healthy, base / "store-good")
    part = "part-00000.zarr"

    def damaged(name: str, damage: Callable[[Path], object]) -> None:
        target = base / f"store-{name}"
        shutil.copytree(healthy, target)
        damage(target)

    damaged("no-manifest", lambda s: (s / "bayes-sched-store.json").unlink())
    damaged("garbage-manifest", lambda s: (s / "bayes-sched-store.json").write_text("{oops"))
    damaged("binary-manifest", lambda s: (s / "bayes-sched-store.json").write_bytes(
        bytes(range(256))))
    damaged("no-parts", lambda s: shutil.rmtree(s / part))
    damaged("missing-variable", lambda s: shutil.rmtree(s / part / "gpu_utilization"))
    damaged("truncated-chunk", lambda s: (s / part / "gpu_utilization" / "0.0.0").write_bytes(
        (s / part / "gpu_utilization" / "0.0.0").read_bytes()[:7]))
    damaged("garbage-zarray", lambda s: (s / part / "network_rx" / ".zarray").write_text("{"))

    def unequal(store: Path) -> None:  # one variable longer along time, as a killed append leaves
        meta_path = store / part / "network_tx" / ".zarray"
        meta = json.loads(meta_path.read_text())
        meta["shape"][0] += 5
        meta_path.write_text(json.dumps(meta))

    damaged("unequal-time", unequal)
    # All-NaN and -1e30 copies, through the store's own writer (xarray, no torch).
    code = (
        "import sys, numpy as np\n"
        "from counters.store import open_store, write_store\n"
        "ds = open_store(sys.argv[1], lazy=False)\n"
        "for name, value in (('all-nan', np.nan), ('minus-1e30', -1e30)):\n"
        "    bad = ds.copy(deep=True)\n"
        "    for v in list(bad.data_vars):\n"
        "        if np.issubdtype(bad[v].dtype, np.floating):\n"
        "            bad[v] = bad[v].where(bad[v].isnull() & ~np.isnan(value), value)\n"
        "            if np.isnan(value) and f'{v}_valid' in bad:\n"
        "                bad[f'{v}_valid'][...] = False\n"
        "    write_store(bad, sys.argv[2] + '/store-' + name)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(healthy), str(base)], check=True, env=env,
                   capture_output=True, timeout=300)


# ---------------------------------------------------------------------------------------------
# The cases.
# ---------------------------------------------------------------------------------------------

PROFILE_BAD = ("binary", "utf16", "latin1", "nul-bytes", "empty", "header-only", "missing-column",
               "extra-field", "duplicated-column", "short-row", "text-number", "nan-step",
               "inf-step", "negative-step", "huge-step", "zero-bsz", "bsz-2-63", "nodes-2-63",
               "replicas-2-63", "accum-2-63", "bsz-400-digits", "fraction-bsz", "unknown-header")
WORKLOAD_BAD = ("binary", "utf16", "latin1", "nul-bytes", "empty", "header-only", "missing-column",
                "extra-field", "duplicated-column", "short-row", "unknown-app", "negative-time",
                "unsorted-time", "nan-time", "inf-time", "duplicate-name", "empty-name",
                "zero-batch", "batch-2-63", "replicas-2-63", "replicas-zero", "fraction-replicas")
VALIDATION_BAD = ("binary", "utf16", "latin1", "nul-bytes", "empty", "header-only",
                  "missing-column", "extra-field", "short-row", "nan-grad", "negative-var",
                  "overflow-ratio", "text-progress", "decreasing-progress")
TOPOLOGY_BAD = tuple(topology_files())
PAIRS_BAD = ("binary", "utf16", "latin1", "empty", "header-only", "missing-column", "extra-field",
             "duplicated-column", "short-row", "zero-speed", "nan-speed", "speed-3", "empty-job",
             "nan-job")
SOLO_BAD = ("binary", "utf16", "empty", "header-only", "extra-field", "nan-feature",
            "inf-feature", "duplicate-job", "no-features")
STORE_BAD = ("no-manifest", "garbage-manifest", "binary-manifest", "no-parts", "missing-variable",
             "truncated-chunk", "garbage-zarray", "unequal-time")
SIM = ("--policy", "fifo", "--interval", "3600", "--no-progress")
COMPARE = ("--policies", "fifo", "--processes", "1", "--interval", "3600", "--no-progress")
ITEM = {"utf16": "5", "binary": "5", "latin1": "5", "bsz-2-63": "6", "nodes-2-63": "6",
        "replicas-2-63": "6", "accum-2-63": "6", "batch-2-63": "6", "deep": "9",
        "deep-object": "9", "digits-400": "9", "string-gpus": "9", "fraction-gpus": "9",
        "bool-capacity": "9", "huge-step": "14", "extra-field": "17", "duplicated-column": "17",
        "empty-job": "17", "nan-job": "17", "overflow-ratio": "13"}


def _file_cases(command: str, prefix: tuple[str, ...], suffix: tuple[str, ...], group: str,
                names: Iterable[str], ext: str = "csv") -> list[Case]:
    return [Case(command, f"{group} file: {name}",
                 (*prefix, f"{{dir}}/{group}-{name}.{ext}", *suffix),
                 f"{group}-{name}.{ext}", item=ITEM.get(name, ""))
            for name in names]


def _flag_cases(command: str, prefix: tuple[str, ...], flag: str, values: Iterable[str],
                suffix: tuple[str, ...] = (), item: str = "", quick: Iterable[str] = ()
                ) -> list[Case]:
    quick = set(quick)
    return [Case(command, f"{flag} {value}", (*prefix, f"{flag}={value}", *suffix), flag,
                 item=item, quick=value in quick) for value in values]


def build_cases() -> list[Case]:  # noqa: PLR0915 (one long, flat list)
    cases: list[Case] = []
    add = cases.extend

    # --- fit throughput / report: step-time profiles -----------------------------------------
    fit_tp = ("fit", "throughput")
    add(_file_cases("fit throughput", fit_tp, ("--method", "point"), "profile", PROFILE_BAD))
    add([
        Case("fit throughput", "a profile with a UTF-8 byte-order mark (valid)",
             (*fit_tp, "{dir}/profile-bom.csv", "--method", "point"), "", status=0, item="5"),
        Case("fit throughput", "folder named like a CSV, empty",
             (*fit_tp, "{dir}/profile-folder.csv"), "profile-folder.csv"),
        Case("fit throughput", "unknown model name", (*fit_tp, "resnet9000"), "resnet9000",
             quick=True),
        Case("fit throughput", "missing profile", fit_tp, "profile"),
        Case("fit throughput", "--method bogus", (*fit_tp, "cifar10", "--method", "bogus"),
             "--method"),
    ])
    add(_flag_cases("fit throughput", (*fit_tp, "cifar10"), "--seed",
                    ("-1", "abc", "1.5", "1e3", "nan", str(2**64)), item="10", quick=("-1",)))
    report = ("report",)
    add(_file_cases("report", report, ("--out", "{case}/rep"), "profile",
                    ("binary", "utf16", "empty", "nan-step", "bsz-2-63", "huge-step",
                     "extra-field")))
    add([
        Case("report", "a fine profile, then an unknown one (read before fitting)",
             ("report", "{dir}/profile-good.csv", "nosuchmodel", "--out", "{case}/rep"),
             "nosuchmodel", item="20", quick=True),
        Case("report", "--out is a file", ("report", "ncf", "--out", "{dir}/a-file.txt"),
             "--out", quick=True),
        Case("report", "--out under a file",
             ("report", "ncf", "--out", "{dir}/a-file.txt/sub"), "--out"),
        Case("report", "--gradients with two profiles",
             ("report", "ncf", "yolov3", "--gradients", "{dir}/validation-good",
              "--out", "{case}/rep"), "--gradients"),
        Case("report", "--gradients is a bad file",
             ("report", "ncf", "--gradients", "{dir}/validation-binary/validation-128.csv",
              "--out", "{case}/rep"), "validation-128.csv", item="5"),
        Case("report", "--method bogus", ("report", "ncf", "--method", "bogus"), "--method"),
        Case("report", "folder with no profile", ("report", "{dir}/empty-folder",
                                                  "--out", "{case}/rep"), "empty-folder"),
    ])
    add(_flag_cases("report", ("report", "ncf", "--out", "{case}/rep"), "--seed",
                    ("-1", "abc", str(2**40)), quick=("-1",)))

    # --- fit efficiency: gradient traces --------------------------------------------------------
    fit_eff = ("fit", "efficiency")
    add([Case("fit efficiency", f"validation file: {name}",
              (*fit_eff, f"{{dir}}/validation-{name}/validation-128.csv"), "validation-128.csv",
              item=ITEM.get(name, ""))
         for name in VALIDATION_BAD])
    add([
        Case("fit efficiency", "validation-128.csv and validation-0128.csv in one folder",
             (*fit_eff, "{dir}/grads-two-names"), "validation-0128.csv", item="13"),
        Case("fit efficiency", "validation-abc.csv", (*fit_eff, "{dir}/grads-bad-name"),
             "validation-abc.csv"),
        Case("fit efficiency", "validation-0.csv", (*fit_eff, "{dir}/validation-zero"),
             "validation-0.csv"),
        Case("fit efficiency", "empty folder", (*fit_eff, "{dir}/empty-folder"), "empty-folder"),
        Case("fit efficiency", "unknown model", (*fit_eff, "alexnet"), "alexnet"),
    ])
    add(_flag_cases("fit efficiency", (*fit_eff, "ncf"), "--init-bsz",
                    ("0", "-5", "1e6", "abc", str(2**70)), item="13", quick=("0",)))
    add(_flag_cases("fit efficiency", (*fit_eff, "ncf"), "--batch-size",
                    ("0", "-1", "nan", "abc")))

    # --- simulate / compare / demo: workloads and cluster options -------------------------------
    sim = ("simulate", "--workload")
    add([Case("simulate", f"workload file: {name}", (*sim, f"{{dir}}/workload-{name}.csv", *SIM),
              f"workload-{name}.csv", item=ITEM.get(name, ""), quick=name == "unknown-app")
         for name in WORKLOAD_BAD])
    add([
        Case("simulate", "a workload with a UTF-8 byte-order mark (valid)",
             (*sim, "{dir}/workload-bom.csv", *SIM), "", status=0, item="5"),
        Case("simulate", "a job submitted after the horizon",
             (*sim, "{dir}/workload-after-horizon.csv", *SIM), "horizon", item="15", quick=True),
        # A batch of 1e12 examples is refused by the reader (batch sizes are bounded by
        # perfmodel.textio.MAX_BATCH = 2^31), so the job never reaches the simulation.
        Case("simulate", "batch 1e12: the job never finishes",
             (*sim, "{dir}/workload-batch-1e12.csv", *SIM), "workload-batch-1e12.csv",
             item="15"),
        Case("simulate", "100000 GPUs on a 64-GPU cluster: never starts",
             (*sim, "{dir}/workload-replicas-1e5.csv", *SIM), "num_replicas", item="15"),
        Case("simulate", "folder named like a CSV", (*sim, "{dir}/workload-folder.csv", *SIM),
             "workload-folder.csv"),
        Case("simulate", "unknown shipped workload", (*sim, "workload-99", *SIM), "workload-99"),
        Case("simulate", "unknown workload set", (*sim, "workloads-9.9/workload-1", *SIM),
             "workloads-9.9"),
        Case("simulate", "missing --workload", ("simulate", "--policy", "fifo"), "--workload"),
        Case("simulate", "unknown --policy", (*sim, "workload-1", "--policy", "nosuch"),
             "--policy"),
        Case("simulate", "unknown --hidden", (*sim, "workload-1", "--hidden", "nosuch"),
             "--hidden"),
        Case("simulate", "--out is a file",
             (*sim, "{dir}/workload-good.csv", *SIM, "--out", "{dir}/a-file.txt"), "--out",
             item="11", quick=True),
        Case("simulate", "--out under a file",
             (*sim, "{dir}/workload-good.csv", *SIM, "--out", "{dir}/a-file.txt/x/y"), "--out",
             item="11"),
    ])
    trace = ("simulate", "--no-progress", "--cluster", "v100:4", "--trace")
    add([
        Case("simulate", "trace: unknown job type", (*trace, "{dir}/trace-unknown-type.trace"),
             "job_type", quick=True),
        Case("simulate", "trace: 9 columns", (*trace, "{dir}/trace-9-columns.trace"), "row 1"),
        Case("simulate", "trace: NaN steps", (*trace, "{dir}/trace-steps-nan.trace"),
             "total_steps"),
        Case("simulate", "trace: scale factor 64", (*trace, "{dir}/trace-too-wide.trace"),
             "scale_factor"),
        Case("simulate", "trace: unknown shipped trace", (*trace, "no_such_trace"),
             "no_such_trace"),
        Case("simulate", "trace with a Pollux-world policy",
             (*trace, "small_test", "--policy", "pollux"), "--policy"),
        Case("simulate", "trace on a GPU type its table does not measure",
             ("simulate", "--no-progress", "--cluster", "a100:4,v100:4", "--trace",
              "small_test", "--policy", "max_min_fairness_perf"), "--cluster a100:4,v100:4"),
        Case("simulate", "trace and --workload together",
             (*trace, "small_test", "--workload", "workload-1"), "--workload"),
    ])
    good_sim = (*sim, "{dir}/workload-good.csv", "--no-progress")
    add(_flag_cases("simulate", good_sim, "--interval",
                    ("nan", "inf", "-inf", "0", "-60", "abc", "1e-9", "1e300"), item="8",
                    quick=("nan", "inf")))
    add(_flag_cases("simulate", good_sim, "--restart-delay", ("nan", "inf", "-5", "abc"),
                    item="8", quick=("nan",)))
    add(_flag_cases("simulate", good_sim, "--interference", ("1", "-0.1", "nan", "2")))
    add(_flag_cases("simulate", good_sim, "--nodes", ("0", "-1", "abc", "1e3", str(10**12)),
                    quick=("0",)))
    add(_flag_cases("simulate", good_sim, "--gpus-per-node", ("0", "-4", "nan")))
    add(_flag_cases("simulate", good_sim, "--max-jobs", ("0", "-3", "x")))

    cmp = ("compare", "--workloads")
    add([Case("compare", f"workload file: {name}",
              (*cmp, f"{{dir}}/workload-{name}.csv", *COMPARE, "--out", "{case}/out"),
              f"workload-{name}.csv", item=ITEM.get(name, ""))
         for name in ("binary", "utf16", "empty", "nan-time", "unknown-app", "batch-2-63",
                      "extra-field")])
    good_cmp = (*cmp, "{dir}/workload-good.csv", *COMPARE)
    add([
        Case("compare", "a job submitted after the horizon",
             (*cmp, "{dir}/workload-after-horizon.csv", *COMPARE, "--out", "{case}/out"),
             "horizon", item="15"),
        Case("compare", "unknown workload", (*cmp, "workload-99", *COMPARE, "--out",
                                             "{case}/out"), "workload-99"),
        Case("compare", "unknown policy", (*cmp, "workload-1", "--policies", "nosuch"),
             "--policies"),
        Case("compare", "--out is a file", (*good_cmp, "--out", "{dir}/a-file.txt"), "--out",
             item="11", quick=True),
        Case("compare", "--out under a file", (*good_cmp, "--out", "{dir}/a-file.txt/r"),
             "--out", item="11"),
    ])
    add(_flag_cases("compare", good_cmp, "--interval", ("nan", "inf", "0"), ("--out",
                    "{case}/out"), item="8", quick=("nan",)))
    add(_flag_cases("compare", good_cmp, "--restart-delay", ("nan", "inf"), ("--out",
                    "{case}/out"), item="8", quick=("inf",)))
    add(_flag_cases("compare", good_cmp, "--processes", ("0", "-2", "abc"), ("--out",
                    "{case}/out")))
    add(_flag_cases("compare", good_cmp, "--max-jobs", ("0", "-3"), ("--out", "{case}/out")))
    # Malformed only: a well-formed address is dialled, and the corpus sends no traffic.
    add(_flag_cases("compare", good_cmp, "--ray", ("nowhere", "localhost:99999", ":6379"),
                    ("--out", "{case}/out")))

    demo = ("demo", "--out", "{case}/out")
    add([
        Case("demo", "--max-jobs -3", (*demo, "--max-jobs", "-3"), "--max-jobs", item="19",
             quick=True),
        Case("demo", "--max-jobs 0", (*demo, "--max-jobs", "0"), "--max-jobs", item="19"),
        Case("demo", "--max-jobs abc", (*demo, "--max-jobs", "abc"), "--max-jobs"),
        Case("demo", "unknown --workload (before the six fits)",
             (*demo, "--workload", "workload-99"), "workload-99", item="19", quick=True),
        Case("demo", "binary --workload", (*demo, "--workload", "{dir}/workload-binary.csv"),
             "workload-binary.csv", item="5"),
        Case("demo", "UTF-16 --workload", (*demo, "--workload", "{dir}/workload-utf16.csv"),
             "workload-utf16.csv", item="5"),
        Case("demo", "NaN time in --workload", (*demo, "--workload",
                                                "{dir}/workload-nan-time.csv"),
             "workload-nan-time.csv"),
        Case("demo", "folder as --workload", (*demo, "--workload", "{dir}/workload-folder.csv"),
             "workload-folder.csv"),
        Case("demo", "job after the horizon",
             (*demo, "--workload", "{dir}/workload-after-horizon.csv"), "horizon", item="15"),
        Case("demo", "--out is a file", ("demo", "--out", "{dir}/a-file.txt"), "--out"),
        Case("demo", "--out under a file", ("demo", "--out", "{dir}/a-file.txt/d"), "--out"),
        Case("demo", "--seed -1", (*demo, "--seed", "-1"), "--seed"),
    ])

    # --- infer contention: stores, topology, jobs ------------------------------------------------
    ic = ("infer", "contention")
    good_ic = (*ic, "{dir}/store-good", "--out", "{case}/rep")
    add([Case("infer contention", f"store: {name}",
              (*ic, f"{{dir}}/store-{name}", "--out", "{case}/rep"), f"store-{name}",
              item="2" if name in ("no-parts", "truncated-chunk", "garbage-zarray") else
              "3" if name == "unequal-time" else "")
         for name in STORE_BAD])
    add([
        Case("infer contention", "store of NaN only (prior alone)",
             (*ic, "{dir}/store-all-nan", "--out", "{case}/rep"), "store-all-nan", item="16"),
        Case("infer contention", "store of -1e30 values (Cholesky failure)",
             (*ic, "{dir}/store-minus-1e30", "--out", "{case}/rep"), "store-minus-1e30",
             item="10"),
        Case("infer contention", "no such store", (*ic, "{dir}/nosuch", "--out", "{case}/rep"),
             "nosuch"),
        Case("infer contention", "store is a file", (*ic, "{dir}/a-file.txt", "--out",
                                                     "{case}/rep"), "a-file.txt"),
        Case("infer contention", "empty folder", (*ic, "{dir}/empty-folder", "--out",
                                                  "{case}/rep"), "empty-folder"),
        Case("infer contention", "--out is a file (after the fit)",
             (*ic, "{dir}/store-good", "--out", "{dir}/a-file.txt"), "--out", item="10"),
        Case("infer contention", "--out under a file",
             (*ic, "{dir}/store-good", "--out", "{dir}/a-file.txt/r"), "--out", item="10"),
        Case("infer contention", "missing --out", (*ic, "{dir}/store-good"), "--out"),
        Case("infer contention", "--topology and --discover-topology",
             (*good_ic, "--topology", "{dir}/topology-good.json", "--discover-topology"),
             "--discover-topology"),
        Case("infer contention", "--jobs without --step-times",
             (*good_ic, "--jobs", "{dir}/syn/jobs.csv"), "--step-times"),
        Case("infer contention", "--jobs no such file",
             (*good_ic, "--jobs", "{dir}/nosuch.csv", "--step-times",
              "{dir}/syn/step_times.csv"), "nosuch.csv"),
        Case("infer contention", "--jobs is a binary file",
             (*good_ic, "--jobs", "{dir}/profile-binary.csv", "--step-times",
              "{dir}/syn/step_times.csv"), "profile-binary.csv", item="5"),
        Case("infer contention", "--jobs is UTF-16",
             (*good_ic, "--jobs", "{dir}/profile-utf16.csv", "--step-times",
              "{dir}/syn/step_times.csv"), "profile-utf16.csv", item="5"),
        Case("infer contention", "--step-times is a folder",
             (*good_ic, "--jobs", "{dir}/syn/jobs.csv", "--step-times",
              "{dir}/empty-folder"), "--step-times"),
        Case("infer contention", "--step-times with the wrong columns",
             (*good_ic, "--jobs", "{dir}/syn/jobs.csv", "--step-times",
              "{dir}/pairs-good.csv"), "pairs-good.csv"),
    ])
    add([Case("infer contention", f"--topology: {name}",
              (*good_ic, "--topology", f"{{dir}}/topology-{name}.json"),
              f"topology-{name}.json", item=ITEM.get(name, ""))
         for name in TOPOLOGY_BAD])
    add([Case("infer contention", "--topology is a folder",
              (*good_ic, "--topology", "{dir}/topology-folder.json"), "topology-folder.json",
              item="9")])
    add(_flag_cases("infer contention", good_ic, "--steps", ("0", "-1", "abc", "nan", "1e9"),
                    item="10"))
    add(_flag_cases("infer contention", good_ic, "--seed", ("-1", "x")))

    # --- infer topology / synthetic / interference ------------------------------------------------
    it = ("infer", "topology", "--no-nvml")
    add([
        Case("infer topology", "--sysfs-root does not exist",
             (*it, "--sysfs-root", "{dir}/nosuch"), "--sysfs-root"),
        Case("infer topology", "--sysfs-root is a file",
             (*it, "--sysfs-root", "{dir}/a-file.txt"), "--sysfs-root"),
        Case("infer topology", "--out exists",
             (*it, "--sysfs-root", "{dir}/empty-folder", "--out", "{dir}/a-file.txt"), "--out"),
        Case("infer topology", "--out is a folder",
             (*it, "--sysfs-root", "{dir}/empty-folder", "--out", "{dir}/empty-folder"),
             "--out"),
        Case("infer topology", "--out under a file",
             (*it, "--sysfs-root", "{dir}/empty-folder", "--out", "{dir}/a-file.txt/t.json"),
             "--out"),
        Case("infer topology", "empty sysfs: no GPUs found",
             (*it, "--sysfs-root", "{dir}/empty-folder"), "empty-folder"),
    ])
    syn = ("infer", "synthetic", "{case}/syn")
    add(_flag_cases("infer synthetic", syn, "--nodes", ("0", "-1", "abc", "1e9"), item="10",
                    quick=("0",)))
    add(_flag_cases("infer synthetic", syn, "--samples", ("0", "1", "-5", "nan"), item="10",
                    quick=("0",)))
    add(_flag_cases("infer synthetic", syn, "--seed", ("-1", "2.5")))
    add([
        Case("infer synthetic", "OUT exists (a file)", ("infer", "synthetic", "{dir}/a-file.txt"),
             "a-file.txt"),
        Case("infer synthetic", "OUT exists (a folder)",
             ("infer", "synthetic", "{dir}/empty-folder"), "empty-folder"),
        Case("infer synthetic", "OUT under a file",
             ("infer", "synthetic", "{dir}/a-file.txt/s"), "a-file.txt"),
    ])
    ii = ("infer", "interference")
    good_jobs = ("--jobs", "a,b", "--steps", "50")
    add([Case("infer interference", f"pairs file: {name}",
              (*ii, f"{{dir}}/pairs-{name}.csv", "{dir}/solo-good.csv", *good_jobs),
              f"pairs-{name}.csv", item=ITEM.get(name, ""))
         for name in PAIRS_BAD])
    add([Case("infer interference", f"solo file: {name}",
              (*ii, "{dir}/pairs-good.csv", f"{{dir}}/solo-{name}.csv", *good_jobs),
              f"solo-{name}.csv", item=ITEM.get(name, ""))
         for name in SOLO_BAD])
    good_ii = (*ii, "{dir}/pairs-good.csv", "{dir}/solo-good.csv")
    add([
        Case("infer interference", "pairs file is a folder",
             (*ii, "{dir}/pairs-folder.csv", "{dir}/solo-good.csv", *good_jobs),
             "pairs-folder.csv", item="20", quick=True),
        Case("infer interference", "solo file is a folder",
             (*ii, "{dir}/pairs-good.csv", "{dir}/solo-folder.csv", *good_jobs),
             "solo-folder.csv", item="20"),
        Case("infer interference", "no such pairs file",
             (*ii, "{dir}/nosuch.csv", "{dir}/solo-good.csv", *good_jobs), "nosuch.csv"),
        Case("infer interference", "--jobs with a typo (checked before the fit)",
             (*good_ii, "--jobs", "a,bb"), "--jobs", item="18", quick=True),
        Case("infer interference", "--jobs with one job", (*good_ii, "--jobs", "a"), "--jobs",
             quick=True),
        Case("infer interference", "--jobs empty", (*good_ii, "--jobs", ""), "--jobs"),
        Case("infer interference", "--jobs commas only", (*good_ii, "--jobs", ",,"), "--jobs"),
        Case("infer interference", "missing --jobs", good_ii, "--jobs"),
    ])
    add(_flag_cases("infer interference", good_ii, "--steps", ("0", "-1", "abc"),
                    ("--jobs", "a,b"), item="16", quick=("0",)))
    add(_flag_cases("infer interference", good_ii, "--seed", ("-1", "nan"), ("--jobs", "a,b")))

    # --- counters info / validate / export / align / repair / catalog -------------------------
    for action in ("info", "validate"):
        add([Case(f"counters {action}", f"store: {name}",
                  ("counters", action, f"{{dir}}/store-{name}"), f"store-{name}",
                  item="2" if name != "unequal-time" else "3",
                  )
             for name in (*STORE_BAD,)])
        add([
            Case(f"counters {action}", "no such store", ("counters", action, "{dir}/nosuch"),
                 "nosuch"),
            Case(f"counters {action}", "a file", ("counters", action, "{dir}/a-file.txt"),
                 "a-file.txt"),
            Case(f"counters {action}", "an empty folder",
                 ("counters", action, "{dir}/empty-folder"), "empty-folder"),
        ])
    add([Case("counters export", f"store: {name}",
              ("counters", "export", f"{{dir}}/store-{name}", "{case}/out.nc"), f"store-{name}",
              item="2")
         for name in STORE_BAD])
    add([
        Case("counters export", "no such store",
             ("counters", "export", "{dir}/nosuch", "{case}/out.nc"), "nosuch"),
        Case("counters export", "OUT exists",
             ("counters", "export", "{dir}/store-good", "{dir}/a-file.txt"), "a-file.txt"),
        Case("counters export", "OUT is a folder",
             ("counters", "export", "{dir}/store-good", "{dir}/empty-folder"), "empty-folder"),
        Case("counters export", "OUT under a file",
             ("counters", "export", "{dir}/store-good", "{dir}/a-file.txt/o.nc"), "a-file.txt"),
    ])
    align = ("counters", "align", "{dir}/store-good", "--interval", "1s")
    add([
        Case("counters align", "--clock-offset node=nan",
             (*align, "--clock-offset", "node000=nan", "--out", "{case}/a.nc"), "--clock-offset",
             item="10"),
        Case("counters align", "--clock-offset unknown node",
             (*align, "--clock-offset", "nosuchnode=5", "--out", "{case}/a.nc"), "nosuchnode",
             item="19"),
        Case("counters align", "--clock-offset without =",
             (*align, "--clock-offset", "node000", "--out", "{case}/a.nc"), "--clock-offset"),
        Case("counters align", "--clock-offset inf",
             (*align, "--clock-offset", "node000=inf", "--out", "{case}/a.nc"), "--clock-offset"),
        Case("counters align", "--out exists", (*align, "--out", "{dir}/a-file.txt"), "--out"),
        Case("counters align", "--out is a folder", (*align, "--out", "{dir}/empty-folder"),
             "--out"),
        Case("counters align", "missing --out", align, "--out"),
    ])
    add(_flag_cases("counters align", ("counters", "align", "{dir}/store-good"), "--interval",
                    ("0", "-1s", "nan", "abc", "infs"), ("--out", "{case}/a.nc")))
    add([Case("counters align", f"store: {name}",
              ("counters", "align", f"{{dir}}/store-{name}", "--interval", "1s", "--out",
               "{case}/a.nc"), f"store-{name}", item="2")
         for name in ("garbage-manifest", "truncated-chunk", "unequal-time", "no-parts")])
    add([
        Case("counters repair", "no such store", ("counters", "repair", "{dir}/nosuch"),
             "nosuch", item="3"),
        Case("counters repair", "a file", ("counters", "repair", "{dir}/a-file.txt"),
             "a-file.txt", item="3"),
        Case("counters repair", "an empty folder", ("counters", "repair", "{dir}/empty-folder"),
             "empty-folder", item="3"),
        Case("counters repair", "a folder of CSVs, not a store",
             ("counters", "repair", "{dir}/grads-two-names"), "grads-two-names", item="3"),
        # Repairing is what repair is for: the marker is rewritten (the folder holds parts), the
        # change is reported on stdout and every committed sample is kept (exit 0).
        Case("counters repair", "binary manifest",
             ("counters", "repair", "{case}/store-binary-manifest"), "rewritten", status=0,
             item="3", fresh=("store-binary-manifest",)),
    ])
    add([
        Case("counters catalog", "--source bogus", ("counters", "catalog", "--source", "bogus"),
             "--source"),
        Case("counters catalog", "--resource bogus",
             ("counters", "catalog", "--resource", "bogus"), "--resource"),
        Case("counters catalog", "unknown action", ("counters", "list-all"), "list-all"),
    ])

    # --- collect ----------------------------------------------------------------------------------
    replay = ("collect", "--replay", "{dir}/store-good", "--quiet", "--duration", "3s")
    out = ("--out", "{case}/store")
    add([
        Case("collect", "--max-parts 0 (deletes the store's parts)",
             (*replay, *out, "--max-parts", "0"), "--max-parts", item="1"),
        Case("collect", "--max-parts -1", (*replay, *out, "--max-parts", "-1"), "--max-parts",
             item="1"),
        Case("collect", "--samples 0", (*replay, *out, "--samples", "0"), "--samples",
             item="19"),
        Case("collect", "--samples -1", (*replay, *out, "--samples", "-1"), "--samples"),
        Case("collect", "--prometheus 70000", (*replay, "--prometheus", "70000"),
             "--prometheus", item="10"),
        Case("collect", "--prometheus -1", (*replay, "--prometheus", "-1"), "--prometheus"),
        Case("collect", "--pid 999999999", (*replay, *out, "--pid", "999999999"), "--pid",
             item="19"),
        Case("collect", "--pid -5", (*replay, *out, "--pid", "-5"), "--pid"),
        Case("collect", "--replay S --out S", ("collect", "--replay", "{case}/store-good",
                                               "--out", "{case}/store-good", "--quiet",
                                               "--duration", "3s"), "--out", item="19",
             fresh=("store-good",)),
        Case("collect", "--replay with --sources", (*replay, *out, "--sources", "nvml"),
             "--sources", item="19"),
        Case("collect", "--sources bogus", ("collect", "--sources", "bogus", "--duration", "2s",
                                            *out), "bogus"),
        Case("collect", "--sources empty", ("collect", "--sources", "", "--duration", "2s",
                                            *out), "--sources"),
        Case("collect", "--replay no such store",
             ("collect", "--replay", "{dir}/nosuch", *out, "--duration", "2s"), "nosuch"),
        Case("collect", "--replay a file",
             ("collect", "--replay", "{dir}/a-file.txt", *out, "--duration", "2s"), "a-file.txt"),
        Case("collect", "--replay a damaged store",
             ("collect", "--replay", "{dir}/store-garbage-manifest", *out, "--duration", "2s"),
             "store-garbage-manifest", item="2"),
        Case("collect", "--out under a file",
             (*replay, "--out", "{dir}/a-file.txt/s"), "a-file.txt"),
        Case("collect", "--out is a damaged store",
             (*replay, "--out", "{case}/store-no-parts"), "store-no-parts", item="2",
             fresh=("store-no-parts",)),
        Case("collect", "no --out and no --prometheus", ("collect", "--duration", "1s"),
             "--out"),
        Case("collect", "--bind not an address", (*replay, "--prometheus", "0", "--bind",
                                                  "999.1.1.1"), "--bind"),
    ])
    add(_flag_cases("collect", (*replay, *out), "--interval", ("nan", "0", "-1s", "abc", "inf")))
    add(_flag_cases("collect", ("collect", "--replay", "{dir}/store-good", *out), "--duration",
                    ("0", "nan", "-5m")))
    add(_flag_cases("collect", (*replay, *out), "--flush-every", ("0", "nan")))
    add(_flag_cases("collect", (*replay, *out), "--max-part-size", ("0", "abc", "-1M")))

    # --- the scheduler service: job files, state directories ------------------------------------
    tokens = {"missing-script": "script", "no-script": "script", "bsz-limit-0": "max_local_bsz",
              "bsz-limit-text": "max_local_bsz", "target-0": "target_epochs",
              "target-float": "target_epochs", "unknown-field": "gpus",
              "max-below-init": "max_batch_size", "bad-name": "name", "bad-tenant": "tenant"}
    add([Case("submit", f"job file: {name}",
              ("submit", f"{{dir}}/job-{name}.toml", "--state", "{case}/state"), token,
              quick=name in ("missing-script", "target-0"))
         for name, token in tokens.items()])
    add([
        Case("submit", "job file not TOML",
             ("submit", "{dir}/job-not-toml.toml", "--state", "{case}/state"), "job-not-toml"),
        Case("submit", "no such job file",
             ("submit", "{dir}/nosuch.toml", "--state", "{case}/state"), "nosuch.toml"),
        Case("status", "no state directory", ("status", "--state", "{case}/none"), "none"),
        Case("cancel", "no state directory", ("cancel", "x", "--state", "{case}/none"), "none"),
        Case("serve", "--gpus 0", ("serve", "--gpus", "0", "--state", "{case}/s"), "--gpus"),
        Case("serve", "--interval nan", ("serve", "--gpus", "1", "--interval", "nan",
                                         "--state", "{case}/s"), "--interval"),
        Case("serve", "unknown policy", ("serve", "--gpus", "1", "--policy", "nosuch",
                                         "--state", "{case}/s"), "nosuch"),
        # issue 36: tenants in serve
        Case("submit", "--tenant empty", ("submit", "{dir}/job-good.toml", "--tenant", "",
                                         "--state", "{case}/state"), "--tenant", item="36"),
        Case("serve", "no such --tenants file", ("serve", "--gpus", "1", "--tenants",
                                                 "{dir}/nosuch-tenants.toml", "--state",
                                                 "{case}/s"), "nosuch-tenants.toml", item="36"),
        Case("serve", "--tenants quotas above the GPUs", (
            "serve", "--gpus", "1", "--tenants", f"{ROOT}/examples/tenants.toml", "--state",
            "{case}/s"), "quotas sum to 2 GPUs, the cluster has 1", item="36"),
    ])

    # --- issue 40 (servetrust): the service's trust model and job-file bounds ------------------
    add([Case("submit", f"job file: {name}",
              ("submit", f"{{dir}}/job-{name}.toml", "--state", "{case}/state"), token,
              item="40", quick=name in JOB_FILE_TRUST_QUICK)
         for name, (_, token) in JOB_FILE_TRUST.items()])
    add([Case("submit", "job file: env-pythonpath with --allow-loader-env",
              ("submit", "{dir}/job-env-pythonpath.toml", "--allow-loader-env", "--state",
               "{case}/state"), "submitted", status=0, item="40")])

    # --- the front door -------------------------------------------------------------------------
    add([
        Case("bayes-sched", "unknown command", ("frobnicate",), "frobnicate", quick=True),
        Case("bayes-sched", "no command", (), "COMMAND"),
        Case("bayes-sched", "fit without a kind", ("fit",), "KIND"),
        Case("bayes-sched", "infer unknown", ("infer", "nothing"), "nothing"),
    ])
    add(state_file_cases())  # issue 40, item 4: see the block at the end
    add(bounds_cases())
    return cases


# ---------------------------------------------------------------------------------------------
# Issue 40, item 5: bounds where memory or time follows a number (cluster sizes, policy and
# search options, traces read only as far as --max-jobs needs).
# ---------------------------------------------------------------------------------------------

#: A Gavel trace line (10 columns) arriving at ``{arrival}`` seconds.
_BOUNDS_TRACE_LINE = "ResNet-18 (batch size 64)\tcmd\tdir\t-n\t1\t1000\t1\t1\t-1\t{arrival}\n"
#: Jobs before the malformed line of the long trace and workload (--max-jobs stops before it).
_BOUNDS_GOOD_ROWS = 5


def write_bounds_fixtures(base: Path) -> None:
    """Cluster files of a billion nodes or GPUs, and a long trace and workload whose row after
    the first :data:`_BOUNDS_GOOD_ROWS` jobs is malformed."""
    node = '[[nodes]]\ngpu_type = "{t}"\ncount = {count}\ngpus = {gpus}\n'
    clusters = {
        "cluster-count-1e9.toml": node.format(t="t4", count=10**9, gpus=4),
        "cluster-gpus-1e9.toml": node.format(t="t4", count=10, gpus=10**9),
        "cluster-total.toml": (node.format(t="t4", count=40_000, gpus=8)
                               + node.format(t="v100", count=40_000, gpus=8)),
        "cluster-count-1e9.json": json.dumps({"nodes": [{"gpu_type": "t4", "count": 10**9,
                                                         "gpus": 4}]}),
    }
    for name, text in clusters.items():
        (base / name).write_text(text)
    (base / "config-binary.toml").write_bytes(bytes(range(256)) * 4)
    with (base / "trace-long.trace").open("w") as handle:
        handle.writelines(_BOUNDS_TRACE_LINE.format(arrival=i) for i in range(_BOUNDS_GOOD_ROWS))
        handle.write(_BOUNDS_TRACE_LINE.format(arrival=0).replace("\t1000\t", "\tnan\t"))
        handle.writelines(_BOUNDS_TRACE_LINE.format(arrival=i) for i in range(200_000))
    rows = [f"j{i},{i},cifar10,1,128" for i in range(_BOUNDS_GOOD_ROWS)]
    (base / "workload-long.csv").write_text("\n".join(
        [WORKLOAD_HEADER, *rows, "bad,0,cifar10,-1,128",
         *(f"k{i},{i},cifar10,1,128" for i in range(100_000))]) + "\n")


def bounds_cases() -> list[Case]:
    """Issue 40 item 5: each case exit 2 with one line naming the flag, file or field (or, for
    a trace cut by --max-jobs before its bad row, a run that works)."""
    sim = ("simulate", "--workload", "{dir}/workload-good.csv", "--interval", "3600",
           "--no-progress")
    trace = ("simulate", "--no-progress", "--cluster", "v100:16", "--policy",
             "max_min_fairness", "--trace")
    cases = [
        Case("simulate", f"--cluster {spec}", (*sim, "--policy", "fifo", "--cluster", spec),
             "--cluster", item="40.5", quick=spec == "1000000000x1:t4")
        for spec in ("1000000000x1:t4", "v100:1000000000", "t4:" + "9" * 40, "1x100000:t4",
                     "70000x1:t4,t4:4")]
    cases += [
        Case("simulate", f"cluster file: {name}",
             (*sim, "--policy", "fifo", "--cluster", f"{{dir}}/{name}"), token, item="40.5",
             quick=name == "cluster-count-1e9.toml")
        for name, token in (("cluster-count-1e9.toml", "nodes[0].count"),
                            ("cluster-gpus-1e9.toml", "nodes[0].gpus"),
                            ("cluster-total.toml", "nodes[1].count"),
                            ("cluster-count-1e9.json", "nodes[0].count"))]
    cases.append(Case("simulate", "--nodes 100000 --gpus-per-node 64",
                      (*sim, "--policy", "fifo", "--nodes", "100000", "--gpus-per-node", "64"),
                      "--nodes", item="40.5"))
    options = (("pollux", "ga.population=1000000000", "ga.population", True),
               ("pollux", "ga.population=-3", "ga.population", True),
               ("pollux", "ga.generations=1000000000", "ga.generations", False),
               ("pollux", "ga.max_elements=1000000000000", "ga.max_elements", False),
               ("pollux", "p=nan", "option p", True),
               ("pollux", "p=inf", "option p", False),
               ("pollux", "p=0", "p is 0", False),
               ("pollux", "max_replicas_cap=-1", "max_replicas_cap", False),
               ("tiresias", "thresholds=[-1]", "thresholds", True),
               ("tiresias", "thresholds=[7200, 3600]", "thresholds", False),
               ("tiresias", "thresholds=[nan]", "thresholds", False),
               ("optimus", "max_replicas.ncf=0", "max_replicas.ncf", False),
               ("bo", "posterior_draws=1000000000", "posterior_draws", False),
               ("fifo", "pollux:p=1", "pollux:p=1", True))
    cases += [Case("simulate", f"--policy {policy} --policy-opt {item}",
                   (*sim, "--policy", policy, "--policy-opt", item), token, item="40.5",
                   quick=quick)
              for policy, item, token, quick in options]
    # Options of the estimators a policy reads (its posterior's draws, bo's pair prior): these
    # were policy options before the estimation stage took them.
    cases += [Case("simulate", f"--policy {policy} --estimator-opt {item}",
                   (*sim, "--policy", policy, "--estimator-opt", item), token, item="40.5")
              for policy, item, token in (
                  ("pollux", "job_posterior.num_samples=1000000000", "num_samples"),
                  ("bo", "bo_colocation.pair_prior.own=-1", "pair_prior.own"))]
    cases += [
        Case("compare", "--policy-opt for a policy not among --policies",
             ("compare", "--workloads", "{dir}/workload-good.csv", *COMPARE, "--out",
              "{case}/rep", "--policy-opt", "pollux:p=1"), "pollux:p=1", item="40.5"),
        Case("simulate", "trace: --policy-opt for a policy not run",
             (*trace, "small_test", "--policy-opt", "shockwave:k=1"), "shockwave:k=1",
             item="40.5"),
        Case("simulate", "trace: shockwave future_rounds 1e9",
             ("simulate", "--no-progress", "--trace", "tacc_120", "--policy", "shockwave",
              "--policy-opt", "future_rounds=1000000000"), "future_rounds", item="40.5"),
        Case("simulate", "long trace cut by --max-jobs before its bad row (runs)",
             (*trace, "{dir}/trace-long.trace", "--max-jobs", str(_BOUNDS_GOOD_ROWS)),
             "max_min_fairness", status=0, item="40.5", quick=True),
        Case("simulate", "--config a binary file", (*sim, "--policy", "fifo", "--config",
                                                    "{dir}/config-binary.toml"),
             "config-binary.toml", item="40.5"),
        Case("simulate", "long trace read whole: its bad row named",
             (*trace, "{dir}/trace-long.trace"), "trace-long.trace", item="40.5"),
        Case("simulate", "long workload cut by --max-jobs before its bad row (runs)",
             ("simulate", "--workload", "{dir}/workload-long.csv", "--policy", "fifo",
              "--no-progress", "--max-jobs", str(_BOUNDS_GOOD_ROWS)), "fifo", status=0,
             item="40.5"),
        Case("simulate", "long workload read whole: its bad row named",
             ("simulate", "--workload", "{dir}/workload-long.csv", "--policy", "fifo",
              "--no-progress"), "num_replicas", item="40.5"),
    ]
    return cases


# ---------------------------------------------------------------------------------------------
# Running and classing.
# ---------------------------------------------------------------------------------------------


def classify(case: Case, returncode: int | None, stderr: str, stdout: str = "") -> str:
    """The outcome of one run (see the module docstring)."""
    if returncode is None:
        return "hang"
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    if returncode == 1 and "internal error" in stderr:
        return "internal error"
    if returncode == 0:
        if case.status != 0:
            return "exit 0"
        return "ok" if case.token.lower() in (stdout + stderr).lower() else "bad message"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if (returncode != case.status or len(lines) != 1
            or case.token.lower() not in lines[0].lower()):
        return "bad message"
    return "ok"


def run_case(case: Case, index: int, base: Path, timeout: float) -> Result:
    case_dir = base / "cases" / f"{index:04d}"
    case_dir.mkdir(parents=True)
    for name in case.fresh:
        shutil.copytree(base / name, case_dir / name)
    args = [a.replace("{dir}", str(base)).replace("{case}", str(case_dir)) for a in case.args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BAYES_SCHED_DEBUG", None)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "bayes_sched", *args], cwd=case_dir,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True, errors="replace",
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the whole group: compare's workers too
        stdout, stderr = process.communicate()
        returncode = None
    seconds = time.perf_counter() - start
    return Result(case.command, case.label, case.item, classify(case, returncode, stderr, stdout),
                  returncode, round(seconds, 2), stderr.strip()[-2000:],
                  " ".join(["bayes-sched", *case.args]))


def run_corpus(cases: list[Case], jobs: int, timeout: float, base: Path | None = None,
               log: Path | None = None) -> list[Result]:
    """Write the fixtures into ``base`` (a temporary folder if ``None``; kept, and reused by a
    later run, if given) and run every case; each result is also appended to ``log`` (JSON
    lines) as it comes, so that an interrupted run keeps what it did."""
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        folder = Path(base or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        needs_stores = any("{dir}/store-" in a or "{dir}/syn" in a or case.fresh
                           for case in cases for a in case.args)
        marker = folder / (".fixtures-with-stores" if needs_stores else ".fixtures")
        if not marker.exists() and not (folder / ".fixtures-with-stores").exists():
            if any(p.name != "cases" for p in folder.iterdir()):
                raise SystemExit(f"{folder}: not empty and holds no corpus fixtures")
            write_fixtures(folder, stores=needs_stores)
            marker.touch()
        shutil.rmtree(folder / "cases", ignore_errors=True)

        def one(item: tuple[int, Case]) -> Result:
            result = run_case(item[1], item[0], folder, timeout)
            if log is not None:
                with log.open("a") as stream:
                    stream.write(json.dumps(asdict(result)) + "\n")
            return result

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, enumerate(cases)))


def summary_rows(results: list[Result]) -> list[dict[str, object]]:
    """One row per sub-command (cases per outcome) plus the totals."""
    by_command: dict[str, Counter[str]] = {}
    for result in results:
        by_command.setdefault(result.command, Counter())[result.outcome] += 1
    rows = [{"command": command, "cases": sum(counts.values()),
             **{outcome: counts[outcome] for outcome in OUTCOMES}}
            for command, counts in by_command.items()]
    total = Counter(result.outcome for result in results)
    rows.append({"command": "TOTAL", "cases": len(results),
                 **{outcome: total[outcome] for outcome in OUTCOMES}})
    return rows


def print_report(results: list[Result], seconds: float, resumed: int = 0) -> None:
    rows = summary_rows(results)
    headers = ["command", "cases", *OUTCOMES]
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in headers]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths, strict=True)))

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for row in rows:
        if row["command"] == "TOTAL":
            print(line(["-" * w for w in widths]))
        print(line([str(row[h]) for h in headers]))
    failures = [r for r in results if r.outcome != "ok"]
    earlier = f" ({resumed} of them from the log)" if resumed else ""
    print(f"\n{len(results)} cases{earlier}, run in {seconds:.0f} s; {len(failures)} not ok:")
    for result in failures:
        last = result.stderr.splitlines()[-1] if result.stderr else ""
        item = f" [item {result.item}]" if result.item else ""
        print(f"- {result.outcome:<14} {result.command}: {result.label}{item} "
              f"(exit {result.returncode}) {last[:160]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="SUBCOMMAND",
                        help="only cases of this sub-command (e.g. simulate, 'counters info', "
                        "infer; repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help="only the representative subset (about 30 cases)")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds before a case counts as a hang (default 60)")
    parser.add_argument("--keep", type=Path,
                        help="write the fixtures here and keep them (a later run reuses them)")
    parser.add_argument("--log", type=Path, help="append each result here (JSON lines) as it "
                        "comes")
    parser.add_argument("--resume", action="store_true",
                        help="with --log: skip the cases the log already holds, count them")
    parser.add_argument("--json", action="store_true", help="print every result as JSON")
    args = parser.parse_args(argv)
    cases = build_cases()
    if args.only:
        cases = [c for c in cases
                 if any(c.command == o or c.command.startswith(o + " ") for o in args.only)]
    if args.quick:
        cases = [c for c in cases if c.quick]
    if not cases:
        parser.error("no case matches --only")
    previous: list[Result] = []
    if args.resume and args.log is not None and args.log.exists():
        wanted = {(c.command, c.label) for c in cases}
        logged = [Result(**json.loads(line)) for line in args.log.read_text().splitlines()
                  if line.strip()]
        previous = [r for r in logged if (r.command, r.label) in wanted]
        done = {(r.command, r.label) for r in previous}
        cases = [c for c in cases if (c.command, c.label) not in done]
    start = time.perf_counter()
    results = previous + run_corpus(cases, args.jobs, args.timeout, args.keep, args.log)
    if args.json:
        json.dump({"summary": summary_rows(results), "results": [asdict(r) for r in results]},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_report(results, time.perf_counter() - start, len(previous))
    return 0


# ---------------------------------------------------------------------------------------------
# Issue 40, item 4: damaged, foreign, empty and newer state files of the scheduler service.
# ---------------------------------------------------------------------------------------------

#: State folders the corpus writes (``state-NAME``), each with a bad ``state.db``.
STATE_KINDS = ("garbage", "zero", "foreign", "no-tables", "newer", "truncated")


def write_state_fixtures(base: Path) -> None:
    """State folders: bad ``state.db`` files, a healthy state, one others can write."""
    import sqlite3

    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.service.state import StateStore
    from bayes_sched.service.state_schema import APPLICATION_ID

    def sqlite_file(path: Path, script: str, application: int = 0, version: int = 0) -> None:
        connection = sqlite3.connect(path)
        connection.executescript(f"{script} PRAGMA application_id = {application}; "
                                 f"PRAGMA user_version = {version};")
        connection.close()

    def state(name: str, jobs: int) -> Path:
        store = StateStore(base / f"state-{name}")
        for k in range(jobs):
            store.submit(RealJobSpec(f"job{k}", ("python", "train.py"), 32, 256, 64, 2,
                                     env={"NOTE": "x" * 600}))
        store.close()
        return store.root / "state.db"

    for kind in STATE_KINDS:
        (base / f"state-{kind}").mkdir()
    (base / "state-garbage" / "state.db").write_text("name,spec\nnot a database\n" * 40)
    (base / "state-zero" / "state.db").write_bytes(b"")
    sqlite_file(base / "state-foreign" / "state.db", "CREATE TABLE songs (title TEXT);")
    sqlite_file(base / "state-no-tables" / "state.db", "")
    sqlite_file(base / "state-newer" / "state.db", "CREATE TABLE later (x);",
                APPLICATION_ID, 99)
    truncated = state("truncated", 30)
    with truncated.open("r+b") as stream:
        stream.truncate(truncated.stat().st_size // 2)
    state("healthy", 1)
    state("open", 1)
    (base / "job-good.toml").write_text('script = "train.py"\ninit_batch_size = 32\n'
                                        "max_local_bsz = 64\ntarget_epochs = 2\n")
    (base / "state-open").chmod(0o777)  # others can write it


def state_file_cases() -> list[Case]:
    """Every command that opens the state, on each bad state file; ``state check|repair``."""
    said = {"garbage": "not a SQLite database", "zero": "--init", "foreign": "not a bayes-sched",
            "no-tables": "--init", "newer": "upgrade", "truncated": "damaged"}
    cases = [Case("status", f"state.db: {kind}", ("status", "--state", f"{{dir}}/state-{kind}"),
                  f"state-{kind}/state.db: ", item="40.4",
                  quick=kind in ("garbage", "zero", "truncated")) for kind in STATE_KINDS]
    cases += [Case("state check", f"state.db: {kind}",
                   ("state", "check", "--state", f"{{dir}}/state-{kind}"), said[kind],
                   item="40.4", quick=kind == "truncated") for kind in STATE_KINDS]
    job = ("{dir}/job-good.toml",)
    return [*cases,
            Case("submit", "state.db: zero bytes", ("submit", *job, "--state",
                                                    "{dir}/state-zero"), "--init", item="40.4"),
            Case("submit", "state.db: truncated", ("submit", *job, "--state",
                                                   "{dir}/state-truncated"), "state-truncated",
                 item="40.4"),
            Case("cancel", "state.db: garbage", ("cancel", "x", "--state",
                                                 "{dir}/state-garbage"), "state-garbage",
                 item="40.4"),
            Case("serve", "state.db: truncated", ("serve", "--gpus", "1", "--state",
                                                  "{dir}/state-truncated"), "state-truncated",
                 item="40.4"),
            Case("serve", "a state others can write", ("serve", "--gpus", "1", "--state",
                                                       "{case}/state-open"), "chmod 700",
                 item="40.3", fresh=("state-open",)),
            Case("status", "--state is a file", ("status", "--state", "{dir}/a-file.txt"),
                 "a-file.txt: is not a folder", item="40.4"),
            Case("state check", "--state is a file",
                 ("state", "check", "--state", "{dir}/a-file.txt"), "a-file.txt", item="40.4"),
            Case("submit", "--state below a file", ("submit", *job, "--state",
                                                    "{dir}/a-file.txt/state"), "a-file.txt",
                 item="40.4"),
            Case("state check", "healthy", ("state", "check", "--state", "{dir}/state-healthy"),
                 "healthy", status=0, item="40.4"),
            Case("state repair", "another program's database",
                 ("state", "repair", "--state", "{dir}/state-foreign"), "state-foreign",
                 item="40.4"),
            Case("state repair", "a newer schema",
                 ("state", "repair", "--state", "{dir}/state-newer"), "upgrade", item="40.4"),
            Case("state repair", "truncated", ("state", "repair", "--state",
                                               "{case}/state-truncated"), "repaired", status=0,
                 item="40.4", fresh=("state-truncated",)),
            ]


if __name__ == "__main__":
    sys.exit(main())
