"""perf: real software events through perf_event_open, real and recorded perf stat output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from collectors import perf_stat
from collectors.perf import PerfSource, paranoid_level, parse_cpu_list, resolve_uncore

FIXTURES = Path(__file__).parent / "fixtures" / "perf"
ROOT = Path(__file__).resolve().parents[1]
needs_perf_events = pytest.mark.skipif(paranoid_level() is None, reason="no perf events here")


def spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(5_000))


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc/PID/stat, seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@needs_perf_events
def test_counts_a_busy_child_process_and_keeps_the_running_fraction() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nd=time.monotonic()+3\nwhile time.monotonic()<d: pass"])
    try:
        source = PerfSource(pids=[child.pid],
                            events=["task-clock", "context-switches", "page-faults", "cycles"])
        found = source.discover()
        assert "perf_task_clock" in found.counters
        assert "perf_task_clock_running_fraction" in found.counters
        # The kernel's account is read on both sides of each sample: this process may be
        # descheduled between a sample and a read while the child runs on (under load a
        # one-sided read was 0.1 s off).
        before_first = _cpu_seconds(child.pid)
        first = source.sample()
        after_first = _cpu_seconds(child.pid)
        time.sleep(0.5)
        before_second = _cpu_seconds(child.pid)
        second = source.sample()
        after_second = _cpu_seconds(child.pid)
    finally:
        child.kill()
        child.wait()
        source.close()
    busy = second["perf_task_clock"] - first["perf_task_clock"]
    # The kernel's own account of the child's CPU time over the same window, in clock ticks
    # (so within a few ticks of each bound); on a busy machine the child may get far less than
    # the 0.5 s.
    assert busy > 0.01
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    assert before_second - after_first - 3 * tick <= busy <= after_second - before_first + 3 * tick
    assert busy < 0.8
    assert second["perf_task_clock_running_fraction"] == pytest.approx(1.0)
    if "perf_cycles" not in found.counters:  # this VM has no PMU
        assert "not supported" in found.unavailable["perf_cycles"]


@needs_perf_events
def test_system_wide_counting_as_root_sees_this_process_work() -> None:
    source = PerfSource(events=["task-clock", "context-switches"])
    found = source.discover()
    if "perf_task_clock" not in found.counters:
        pytest.skip(found.unavailable["perf_task_clock"])
    first = source.sample()
    spin(0.3)
    second = source.sample()
    source.close()
    # System-wide task-clock counts every CPU's time: at least the wall time we waited.
    assert second["perf_task_clock"] - first["perf_task_clock"] >= 0.25
    assert second["perf_context_switches"] >= first["perf_context_switches"]


@needs_perf_events
def test_without_capabilities_it_says_why_and_falls_back_to_user_space() -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0 or (paranoid_level() or 0) < 1:
        pytest.skip("needs root, setpriv and perf_event_paranoid >= 1 to drop CAP_PERFMON")
    code = (
        "import json, os\n"
        "from collectors.perf import PerfSource\n"
        "wide = PerfSource(events=['task-clock']).discover()\n"
        "own = PerfSource(pids=[os.getpid()], events=['task-clock'])\n"
        "found = own.discover()\n"
        "print(json.dumps({'wide': wide.unavailable, 'own': found.counters,\n"
        "                  'notes': found.notes}))\n"
    )
    result = subprocess.run(
        [setpriv, "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True)
    report = json.loads(result.stdout)
    assert "system-wide perf counting needs kernel.perf_event_paranoid <= 0" in \
        report["wide"]["perf_task_clock"]
    assert "perf_task_clock" in report["own"]
    assert any("user space only" in note for note in report["notes"])
    # The collector starts, says it once, serves its other sources and its perf source as down.
    started = subprocess.run(
        [setpriv, "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-m", "bayes_sched",
         "collect", "--sources", "perf,procfs", "--prometheus", "0", "--samples", "2",
         "--interval", "0.05s"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert started.returncode == 0, started.stderr
    perf_lines = [line for line in started.stderr.splitlines() if "perf:" in line]
    assert len(perf_lines) == 2, perf_lines  # "reading 0 counter(s)" and the reason
    assert "needs kernel.perf_event_paranoid <= 0" in perf_lines[1]


def test_real_software_recordings_parse_to_catalog_values() -> None:
    csv = perf_stat.parse((FIXTURES / "software-csv.txt").read_text(), "software-csv.txt")
    values = perf_stat.to_values(csv)
    assert values["perf_task_clock"] == pytest.approx(0.88e-3)
    assert values["perf_page_faults"] == 74.0
    assert np.isnan(values["perf_cycles"]) and np.isnan(values["perf_cycles_running_fraction"])
    assert [r.status for r in csv if r.event == "cycles"] == ["not supported"]
    json_values = perf_stat.to_values(perf_stat.parse((FIXTURES / "software-json.txt").read_text()))
    assert json_values["perf_task_clock"] == pytest.approx(0.935828e-3)
    intervals = perf_stat.by_interval(
        perf_stat.parse((FIXTURES / "software-interval-csv.txt").read_text()))
    assert list(intervals) == pytest.approx([0.200283513, 0.402150767, 0.451380007])
    assert perf_stat.to_values(intervals[0.402150767])["perf_context_switches"] == 186.0


def test_hardware_and_uncore_output_keeps_multiplexing_as_a_variable() -> None:
    values = perf_stat.to_values(perf_stat.parse((FIXTURES / "hardware-csv.txt").read_text()))
    assert values["perf_cycles"] == 10498733192.0
    assert values["perf_cycles_running_fraction"] == pytest.approx(0.7997)
    assert values["perf_dram_read"] == pytest.approx(2271.04 * 1048576)
    from_json = perf_stat.to_values(perf_stat.parse((FIXTURES / "hardware-json.txt").read_text()))
    assert from_json["perf_instructions_running_fraction"] == pytest.approx(0.5001)
    assert np.isnan(from_json["perf_cache_misses"])  # <not counted> is missing, not zero
    intervals = perf_stat.by_interval(
        perf_stat.parse((FIXTURES / "hardware-interval-csv.txt").read_text()))
    second = perf_stat.to_values(list(intervals.values())[1])
    assert second["perf_cycles"] == 2624433019.0 and np.isnan(second["perf_cache_misses"])
    assert perf_stat.canonical_event("cpu_core/cycles/") == "cycles"
    assert perf_stat.canonical_event("uncore_imc_3/cas_count_read/") == "uncore_imc/cas_count_read/"


def test_malformed_perf_output_names_the_line() -> None:
    with pytest.raises(perf_stat.PerfStatParseError, match="out.txt, line 2"):
        perf_stat.parse_csv("1,,cycles,10,100.00,,\nabc,,cycles,x,100.00,,\n", "out.txt")
    with pytest.raises(perf_stat.PerfStatParseError, match="line 1: not a perf stat JSON"):
        perf_stat.parse_json('{"event": "cycles"}\n')


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf tool not installed")
def test_the_real_perf_tool_output_parses() -> None:
    result = subprocess.run(
        ["perf", "stat", "-x,", "-e", "task-clock,context-switches,page-faults", sys.executable,
         "-c", "sum(range(300000))"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        pytest.skip(f"perf stat failed: {result.stderr.strip()[:100]}")
    values = perf_stat.to_values(perf_stat.parse(result.stderr))
    assert values["perf_task_clock"] > 0.001 and values["perf_page_faults"] > 10
    assert values["perf_task_clock_running_fraction"] == pytest.approx(1.0)


def test_uncore_events_resolve_from_a_pmu_sysfs_tree(tmp_path: Path) -> None:
    pmu = tmp_path / "uncore_imc_0"
    (pmu / "events").mkdir(parents=True)
    (pmu / "format").mkdir()
    (pmu / "type").write_text("14\n")
    (pmu / "cpumask").write_text("0,28\n")
    (pmu / "events" / "cas_count_read").write_text("event=0x04,umask=0x03\n")
    (pmu / "events" / "cas_count_read.scale").write_text("6.103515625e-5\n")
    (pmu / "events" / "cas_count_read.unit").write_text("MiB\n")
    (pmu / "format" / "event").write_text("config:0-7\n")
    (pmu / "format" / "umask").write_text("config:8-15\n")
    event = resolve_uncore(str(pmu), "cas_count_read")
    assert (event.type_, event.config, event.cpus) == (14, 0x0304, [0, 28])
    assert event.scale == pytest.approx(64.0)  # one CAS = one 64-byte line
    assert parse_cpu_list("0-3,6,8-9\n") == [0, 1, 2, 3, 6, 8, 9]


def _fake_proc(root: Path, paranoid: str, capabilities: int) -> str:
    (root / "sys" / "kernel").mkdir(parents=True)
    (root / "sys" / "kernel" / "perf_event_paranoid").write_text(paranoid + "\n")
    (root / "self").mkdir()
    (root / "self" / "status").write_text(f"Name:\tpython\nCapEff:\t{capabilities:016x}\n")
    return str(root)


def test_a_missing_system_wide_permission_is_one_line_at_start(tmp_path: Path) -> None:
    # paranoid 2 and no capability: every event unavailable for one reason, none opened.
    proc = _fake_proc(tmp_path / "p2", "2", 0)
    source = PerfSource(proc=proc)
    found = source.discover()
    assert found.counters == [] and source._fds == {}
    lines = found.lines()
    assert len(lines) == 2, lines  # "reading 0 counter(s)", then the one reason
    assert "kernel.perf_event_paranoid <= 0 (this host: 2) or CAP_PERFMON" in lines[1]
    assert "AmbientCapabilities=CAP_PERFMON" in lines[1]
    # Permitted: paranoid <= 0, or CAP_PERFMON (bit 38) or CAP_SYS_ADMIN (bit 21) in effect.
    from collectors.perf import system_wide_refusal

    assert system_wide_refusal(_fake_proc(tmp_path / "p0", "0", 0)) is None
    assert system_wide_refusal(_fake_proc(tmp_path / "cap", "2", 1 << 38)) is None
    assert system_wide_refusal(_fake_proc(tmp_path / "adm", "3", 1 << 21)) is None
    # Counting given processes is another permission: not refused up front.
    assert PerfSource(pids=[os.getpid()], proc=proc).discover().notes
