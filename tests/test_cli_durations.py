"""One duration syntax for every time flag (issue 35, item 1): ``30``, ``30s``, ``5m``, ``1h``,
``500ms`` mean the same everywhere, each flag keeps its bounds, and a bad value is one line naming
the flag, exit status 2."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bayes_sched.cli as cli
from bayes_sched.cli.options import duration

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop(cli.DEBUG_VARIABLE, None)

#: Every time flag: the command's arguments before the flag, the flag, and its namespace name.
TIME_FLAGS = [
    (["serve"], "--interval", "interval"),
    (["serve"], "--restart-delay", "restart_delay"),
    (["serve"], "--checkpoint-timeout", "checkpoint_timeout"),
    (["serve"], "--stop-grace", "stop_grace"),
    (["serve"], "--report-timeout", "report_timeout"),
    (["serve"], "--backoff", "backoff"),
    (["serve"], "--counters-window", "counters_window"),
    (["simulate", "--workload", "workload-1"], "--interval", "interval"),
    (["simulate", "--workload", "workload-1"], "--restart-delay", "restart_delay"),
    (["compare"], "--interval", "interval"),
    (["compare"], "--restart-delay", "restart_delay"),
    (["collect"], "--interval", "interval"),
    (["collect"], "--duration", "duration"),
    (["collect"], "--flush-every", "flush_every"),
    (["counters", "align", "s1", "--out", "o.nc"], "--interval", "interval"),
]


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser(argv).parse_args(argv)


@pytest.mark.parametrize(("before", "flag", "dest"), TIME_FLAGS)
def test_every_time_flag_reads_units(before: list[str], flag: str, dest: str) -> None:
    plain = getattr(_parse([*before, flag, "300"]), dest)
    assert plain == 300.0
    assert getattr(_parse([*before, flag, "5m"]), dest) == plain
    assert getattr(_parse([*before, f"{flag}=300s"]), dest) == plain


def test_ray_timeout_reads_units_within_its_bounds() -> None:
    assert _parse(["serve", "--ray-timeout", "1m"]).ray_timeout == 60.0
    assert _parse(["serve", "--ray-timeout", "500ms"]).ray_timeout == 0.5


def test_duration_units_and_bounds() -> None:
    parse = duration(0.0, 3600.0)
    assert parse("30") == parse("30s") == 30.0
    assert parse("0.5s") == 0.5
    assert parse("1h") == 3600.0
    assert parse("1500ms") == 1.5
    for bad in ("5x", "-1s", "nan", "inf", "1e400", "", "s", "2h", "1 m s"):
        with pytest.raises(Exception, match="duration"):
            parse(bad)
    with pytest.raises(Exception, match="duration"):
        duration(0.0, min_open=True)("0s")


@pytest.mark.parametrize("bad", ["5x", "-1s", "nan"])
@pytest.mark.parametrize(("before", "flag"), [(["serve"], "--interval"),
                                              (["simulate", "--workload", "workload-1"],
                                               "--restart-delay"),
                                              (["collect"], "--interval")])
def test_bad_duration_is_one_line_naming_the_flag(before: list[str], flag: str,
                                                  bad: str) -> None:
    result = subprocess.run([sys.executable, "-m", "bayes_sched", *before, f"{flag}={bad}"],
                            capture_output=True, text=True, env=ENV, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in result.stderr, lines


def test_help_states_the_syntax_once() -> None:
    for command in (["serve"], ["simulate"], ["collect"]):
        text = subprocess.run([sys.executable, "-m", "bayes_sched", *command, "--help"],
                              capture_output=True, text=True, env=ENV, timeout=60).stdout
        assert text.count("5m, 1h") == 1, text


def test_serve_and_the_simulator_share_their_round_defaults() -> None:
    # Issue 35: --restart-delay defaulted to 30 s in simulate and 10 s in serve.
    from bayes_sched.backends.local import LocalLauncher
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.round_timing import DEFAULT_RESTART_DELAY, DEFAULT_ROUND_INTERVAL

    served = _parse(["serve"])
    simulated = ClusterSpec.homogeneous(1, 4, "t4")
    assert served.restart_delay == simulated.restart_delay == DEFAULT_RESTART_DELAY == 30.0
    assert served.interval == simulated.round_interval == DEFAULT_ROUND_INTERVAL
    local = LocalLauncher(2, "cpu").cluster_spec()
    assert (local.restart_delay, local.round_interval) == (DEFAULT_RESTART_DELAY,
                                                           DEFAULT_ROUND_INTERVAL)
