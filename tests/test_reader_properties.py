"""Property tests (hypothesis, derandomized) for every reader: any input either parses into a valid
object or raises the toolkit's own error, never another exception type.

Inputs are random bytes, valid files with cells, fields and rows mutated and re-encoded, and random
JSON trees. The default suite runs ``EXAMPLES`` examples per reader;
``HYPOTHESIS_PROFILE=thorough`` (or the slow-marked test below) runs thousands.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_sched.errors import InputError as SchedInputError
from bayes_sched.interference.tables import read_pairs_csv, read_solo_features_csv
from bayes_sched.sim.workload import read_workload
from bayes_sched.topology import read_topology
from collectors import perf_stat
from collectors.procfs import (
    ProcfsParseError,
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
    parse_psi,
    parse_stat_cpu,
)
from perfmodel.errors import InputError
from perfmodel.profiles import (
    StepTimeProfile,
    read_gradient_traces,
    read_step_time_profile,
    read_validation_csv,
)

ROOT = Path(__file__).resolve().parents[1]
THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"
EXAMPLES = 3000 if THOROUGH else 120
settings.register_profile(
    "readers", max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)
READERS = settings.get_profile("readers")

# --- strategies ------------------------------------------------------------------------------------

#: Cell values that have broken readers: huge, non-finite, negative, fractional, empty, odd bytes.
EVIL_CELLS = [
    "", " ", "0", "-1", "1.5", "nan", "inf", "-inf", "1e300", "1e-320", str(2**63),
    str(2**64 + 1), "9" * 400, "1e999", "0x10", "abc", '"', '""', "\x00", "é", "٣", "1_0",
    "NA", "null", "True", "+3", " 7 ", "-0", "3.0", "1e3",
]


@st.composite
def mutated_csv(draw: st.DrawFn, valid: str) -> bytes:
    """``valid`` CSV text with some cells, fields, rows or the header changed, then encoded."""
    rows = [line.split(",") for line in valid.splitlines()]
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["cell", "cell", "extra", "drop", "duprow", "blank",
                                     "dupcol", "text"]))
        r = draw(st.integers(0, len(rows) - 1))
        if kind == "cell" and rows[r]:
            c = draw(st.integers(0, len(rows[r]) - 1))
            rows[r][c] = draw(st.sampled_from(EVIL_CELLS) | st.text(max_size=6))
        elif kind == "extra":
            rows[r].append(draw(st.sampled_from(EVIL_CELLS)))
        elif kind == "drop" and rows[r]:
            rows[r].pop(draw(st.integers(0, len(rows[r]) - 1)))
        elif kind == "duprow":
            rows.insert(r, list(rows[r]))
        elif kind == "blank":
            rows.insert(r, [])
        elif kind == "dupcol" and rows[0]:
            rows[0].append(draw(st.sampled_from(rows[0])))
        elif kind == "text":
            rows[r] = draw(st.text(max_size=20)).split(",")
    text = "\n".join(",".join(row) for row in rows) + draw(st.sampled_from(["\n", "", "\r\n"]))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16",
                                     "latin-1"]))
    return text.encode(encoding, errors="replace")


def inputs(valid: str) -> st.SearchStrategy[bytes]:
    """Random bytes, or a mutated valid file."""
    return st.binary(max_size=200) | mutated_csv(valid)


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


# --- step-time profiles and gradient traces --------------------------------------------------------

PLACEMENTS = ("placement,local_bsz,step_time,sync_time\n1,32,0.04,0.0005\n2,64,0.05,0.01\n"
              "22,128,0.09,0.03\n")
SCALABILITY = ("num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,2,32,0.05,0.01\n"
               "2,4,64,0.08,0.03\n")
PROFILE = ("num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time,placement\n"
           "1,2,32,0,0.05,0.01,2\n2,4,64,3,0.08,0.03,22\n")
VALIDATION = ("progress,iteration,metric,grad_sqr,grad_var\n100,10,0.5,2.0,1.0\n"
              "200,20,0.6,1.5,1.2\n300,30,0.7,1.0,1.5\n")


def _check_profile(profile: StepTimeProfile) -> None:
    assert len(profile) > 0
    for array in (profile.step_time, profile.sync_time):
        assert np.all(np.isfinite(array))
    assert np.all(profile.step_time > 0) and np.all(profile.sync_time < profile.step_time)
    assert np.all(profile.num_nodes >= 1) and np.all(profile.num_replicas >= profile.num_nodes)
    assert np.all(profile.local_bsz >= 1) and np.all(profile.accum_steps >= 0)
    # Products of the bounded counts stay inside int64.
    total = profile.local_bsz * profile.num_replicas * (profile.accum_steps + 1)
    assert np.all(total > 0)


@pytest.mark.parametrize(("name", "valid"), [
    ("placements.csv", PLACEMENTS), ("scalability.csv", SCALABILITY), ("job.csv", PROFILE),
], ids=["placements", "scalability", "profile"])
def test_step_time_readers_parse_or_raise_input_error(tmp_path: Path, name: str,
                                                      valid: str) -> None:
    @READERS
    @given(inputs(valid))
    def check(data: bytes) -> None:
        path = _write(tmp_path, name, data)
        try:
            profile = read_step_time_profile(path)
        except InputError as error:
            assert "\n" not in str(error) and str(path) in str(error)
            return
        _check_profile(profile)

    check()


def test_gradient_readers_parse_or_raise_input_error(tmp_path: Path) -> None:
    @READERS
    @given(inputs(VALIDATION), st.sampled_from(["validation-128.csv", "validation-0.csv",
                                                "validation-" + "9" * 30 + ".csv"]))
    def check(data: bytes, name: str) -> None:
        for old in tmp_path.glob("validation-*"):
            old.unlink()
        path = _write(tmp_path, name, data)
        try:
            trace = read_validation_csv(path)
            traces = read_gradient_traces(tmp_path)
        except InputError as error:
            assert "\n" not in str(error)
            return
        assert trace.batch_size >= 1 and list(traces) == [trace.batch_size]
        assert np.all(np.isfinite(trace.log_noise_to_signal)
                      | np.isinf(trace.log_noise_to_signal))
        assert np.all(np.diff(trace.progress) >= 0)

    check()


# --- workloads, pairs and solo features, topology --------------------------------------------------

WORKLOAD = ("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n"
            "b,10.5,bert,4,384\n")
PAIRS = "job_a,job_b,speed_a,speed_b\na,b,0.8,0.9\nb,c,1.2,0.5\n"
SOLO = "job,util,log_steps\na,0.5,1.0\nb,0.25,-2.0\n"


def test_workload_reader_parses_or_raises_input_error(tmp_path: Path) -> None:
    @READERS
    @given(inputs(WORKLOAD))
    def check(data: bytes) -> None:
        path = _write(tmp_path, "w.csv", data)
        try:
            workload = read_workload(path)
        except SchedInputError as error:
            assert "\n" not in str(error) and str(path) in str(error)
            return
        times = [job.submit_time for job in workload.jobs]
        assert times == sorted(times) and all(math.isfinite(t) and t >= 0 for t in times)
        assert len({job.name for job in workload.jobs}) == len(workload.jobs)
        assert all(job.name.strip() for job in workload.jobs)

    check()


def test_pairs_and_solo_readers_parse_or_raise_input_error(tmp_path: Path) -> None:
    @READERS
    @given(inputs(PAIRS), inputs(SOLO))
    def check(pairs_data: bytes, solo_data: bytes) -> None:
        pairs_path = _write(tmp_path, "pairs.csv", pairs_data)
        solo_path = _write(tmp_path, "solo.csv", solo_data)
        try:
            pairs = read_pairs_csv(pairs_path)
        except SchedInputError as error:
            assert "\n" not in str(error) and str(pairs_path) in str(error)
        else:
            assert list(pairs.columns[:4]) == ["job_a", "job_b", "speed_a", "speed_b"]
            speeds = pairs[["speed_a", "speed_b"]].to_numpy(dtype=float)
            assert np.all((speeds > 0) & (speeds <= 2))
            assert all(isinstance(n, str) and n for n in pairs["job_a"].tolist()
                       + pairs["job_b"].tolist())
        try:
            solo = read_solo_features_csv(solo_path)
        except SchedInputError as error:
            assert "\n" not in str(error) and str(solo_path) in str(error)
        else:
            assert np.all(np.isfinite(solo.to_numpy(dtype=float))) and solo.index.is_unique

    check()


JSON_LEAVES = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8))
JSON_TREES = st.recursive(JSON_LEAVES, lambda children: st.lists(children, max_size=5)
                          | st.dictionaries(st.text(max_size=8), children, max_size=5),
                          max_leaves=20)
TOPOLOGY_KEYS = ["gpus_per_switch", "switch_numa", "pcie_switch_capacity", "dram_capacity",
                 "nic_capacity"]
TOPOLOGY_OBJECTS = st.dictionaries(
    st.sampled_from(TOPOLOGY_KEYS),
    st.lists(st.integers(-2, 300) | JSON_LEAVES, min_size=0, max_size=5)
    | st.floats(allow_nan=True, allow_infinity=True) | JSON_TREES,
)
TOPOLOGY_TEXT = (
    st.builds(json.dumps, TOPOLOGY_OBJECTS) | st.builds(json.dumps, JSON_TREES)
    | st.integers(1, 3000).map(lambda depth: "[" * depth + "]" * depth)
)


def test_topology_reader_parses_or_raises_input_error(tmp_path: Path) -> None:
    @READERS
    @given(TOPOLOGY_TEXT.map(str.encode) | st.binary(max_size=100))
    def check(data: bytes) -> None:
        path = _write(tmp_path, "topo.json", data)
        try:
            topology = read_topology(path)
        except SchedInputError as error:
            assert "\n" not in str(error) and str(path) in str(error)
            return
        assert all(type(g) is int and g >= 1 for g in topology.gpus_per_switch)
        assert len(topology.switch_numa) == topology.num_switches
        assert topology.switch_membership().shape == (topology.num_switches, topology.num_gpus)
        for _, _, capacity in topology.resources():
            assert math.isfinite(capacity) and capacity > 0

    check()


# --- collectors: perf stat and procfs --------------------------------------------------------------

PERF_CSV = ("1.001047203,4004.43,msec,task-clock,4004433119,100.00,4.000,CPUs utilized\n"
            "1.001047203,2621874512,,cycles,3203117460,79.99,0.655,GHz\n"
            "<not counted>,,cache-misses,0,0.00,,\n")
PERF_JSON_RECORD = {"counter-value": "0.935828", "unit": "msec", "event": "task-clock",
                    "event-runtime": 935828, "pcnt-running": 100.00}
PERF_JSON = st.lists(
    st.dictionaries(st.sampled_from([*PERF_JSON_RECORD, "interval"]),
                    JSON_LEAVES | st.sampled_from(list(PERF_JSON_RECORD.values())))
    .map(lambda record: json.dumps({**PERF_JSON_RECORD, **record}))
    | st.builds(json.dumps, JSON_TREES), min_size=1, max_size=4,
).map("\n".join)


def test_perf_stat_parsers_parse_or_raise_their_error() -> None:
    @READERS
    @given(mutated_csv(PERF_CSV).map(lambda b: b.decode("utf-8", errors="replace"))
           | PERF_JSON | st.text(max_size=100)
           | st.integers(1, 3000).map(lambda depth: "{" + '"a":[' * depth + "]" * depth + "}"))
    def check(text: str) -> None:
        try:
            readings = perf_stat.parse(text, "out")
        except perf_stat.PerfStatParseError as error:
            assert "\n" not in str(error) and "out, line" in str(error)
            return
        for reading in readings:
            assert reading.event.strip() and 0.0 <= reading.fraction_running <= 1.0
            assert math.isfinite(reading.running_ns) and reading.running_ns >= 0
            assert (math.isnan(reading.value) if reading.status != "counted"
                    else math.isfinite(reading.value) and reading.value >= 0)
        for group in perf_stat.by_interval(readings).values():
            perf_stat.to_values(group)

    check()


PROC_STAT = "cpu  69462 323838 31126 36013 267 0 162 471 0 0\ncpu0 28725 166840 13005 21784 46\n"
MEMINFO = "MemTotal:       24684084 kB\nMemAvailable:   19825788 kB\nCached:          1631404 kB\n"
PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=120\nfull avg10=0.00 total=7\n"
NET_DEV = ("Inter-|   Receive |  Transmit\n face |bytes    packets|bytes\n"
           "  eth0: 1024 3 0 0 0 0 0 0 306 2 0 0 0 0 0 0\n")
DISKSTATS = "   8       0 sda 10 0 100 5 20 0 200 7 0 12 12 0 0 0 0\n"
PROCFS: list[tuple[str, Callable[[str], dict[str, float]]]] = [
    (PROC_STAT, lambda text: parse_stat_cpu(text, 100.0)),
    (MEMINFO, parse_meminfo),
    (PSI, parse_psi),
    (NET_DEV, parse_net_dev),
    (DISKSTATS, lambda text: parse_diskstats(text, {"sda"})),
]


@st.composite
def mutated_proc(draw: st.DrawFn, valid: str) -> str:
    words = valid.split(" ")
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(0, len(words) - 1))
        words[position] = draw(st.sampled_from([*EVIL_CELLS, "total=-5", "total=nan", "kB",
                                                "cpu", "MemTotal:", "\n"]))
    return " ".join(words)


@pytest.mark.parametrize("index", range(len(PROCFS)), ids=["stat", "meminfo", "psi", "net_dev",
                                                           "diskstats"])
def test_procfs_parsers_parse_or_raise_their_error(index: int) -> None:
    valid, parse = PROCFS[index]

    @settings(READERS, max_examples=max(EXAMPLES // 3, 30))
    @given(mutated_proc(valid) | st.text(max_size=80))
    def check(text: str) -> None:
        try:
            values = parse(text)
        except ProcfsParseError as error:
            assert "\n" not in str(error)
            return
        assert all(math.isfinite(v) and v >= 0 for v in values.values())

    check()


@pytest.mark.slow
def test_thorough_profile_runs_thousands_of_examples_per_reader() -> None:
    """The same properties with ``HYPOTHESIS_PROFILE=thorough`` (3000 examples per reader)."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "thorough", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", __file__],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:]
