"""Seeds and intervals: one seed reaches every random stream of a run; means and t-intervals over
seeds; headlines against a baseline; line styles that keep many series apart."""

from __future__ import annotations

import math

import pytest

from bayes_sched.cli import build_parser
from bayes_sched.cli.simulate import _config, _policy_options
from bayes_sched.policies import POLICIES, make_policy
from bayes_sched.sim.report import headline_text, headlines
from bayes_sched.sim.report_parts import series_styles
from bayes_sched.sim.seeds import mean_interval, seed_rows, with_seed


def _args(*argv: str):  # noqa: ANN202
    words = ["simulate", "--workload", "workload-1", *argv]
    return build_parser(words).parse_args(words)


def test_with_seed_fills_every_seed_option_the_user_left_unset() -> None:
    pollux = with_seed(POLICIES.options("pollux"), {"ga": {"population": 24}}, 7)
    assert pollux["ga"] == {"population": 24, "seed": 7}
    bo = with_seed(POLICIES.options("bo"), {"ga": {"seed": 3}}, 7)
    assert bo["ga"]["seed"] == 3  # set by the user: kept
    assert with_seed(POLICIES.options("fifo"), {}, 7) == {}


def test_cli_seed_reaches_policy_hidden_law_and_simulator() -> None:
    args = _args("--policy", "pollux", "--hidden", "contention", "--seed", "5")
    config = _config(args, 5)
    assert config.seed == 5 and config.hidden is not None and config.hidden.seed == 5
    options = _policy_options(args, ["pollux", "bo"], 5)
    pollux = make_policy("pollux", **options["pollux"])
    assert pollux.ga.seed == 5 and options["bo"]["ga"].seed == 5
    # An explicit seed option keeps its value.
    explicit = _args("--policy-opt", "ga.seed=9", "--hidden", "contention",
                     "--hidden-opt", "seed=4")
    assert _policy_options(explicit, ["pollux"], 5)["pollux"]["ga"].seed == 9
    assert _config(explicit, 5).hidden.seed == 4  # type: ignore[union-attr]


def test_mean_interval_is_the_student_t_interval() -> None:
    mean, low, high = mean_interval([1.0, 2.0, 3.0, math.nan])
    # t(0.95, 2) = 2.919986; sd = 1; n = 3
    assert mean == 2.0 and high - mean == pytest.approx(2.919986 / math.sqrt(3), rel=1e-5)
    assert low == pytest.approx(4.0 - high)
    one = mean_interval([5.0])
    assert one[0] == 5.0 and math.isnan(one[1]) and math.isnan(one[2])


def _row(policy: str, workload: str, seed: int, avg_jct: float) -> dict[str, object]:
    return {"policy": policy, "workload": workload, "seed": seed, "avg_jct": avg_jct,
            "finished": 3, "median_jct": avg_jct, "p99_jct": avg_jct, "makespan": avg_jct,
            "utilization": 0.5, "ftf_mean": 1.0, "restarts_per_job": 0.0}


ROWS = [_row("fifo", w, s, v) for w, s, v in (("a", 0, 100.0), ("b", 0, 300.0),
                                              ("a", 1, 120.0), ("b", 1, 280.0))] + \
       [_row("pollux", w, s, v) for w, s, v in (("a", 0, 50.0), ("b", 0, 150.0),
                                                ("a", 1, 80.0), ("b", 1, 220.0))]


def test_seed_rows_keep_each_seed_and_the_interval() -> None:
    rows = seed_rows(list(reversed(ROWS)))
    first = next(r for r in rows if (r["policy"], r["workload"]) == ("fifo", "a"))
    assert first["seeds"] == 2 and first["avg_jct"] == 110.0
    assert first["per_seed"] == {**first["per_seed"], "seed": [0, 1], "avg_jct": [100.0, 120.0]}
    assert first["avg_jct_lower_90"] < 100.0 < 120.0 < first["avg_jct_upper_90"]


def test_headline_pairs_seeds_and_averages_workloads() -> None:
    (line,) = headlines(ROWS, "fifo")
    # seed 0: 100 / 200 -> -50 %; seed 1: 150 / 200 -> -25 %.
    assert line["policy"] == "pollux" and line["change_pct"] == pytest.approx(-37.5)
    assert line["change_pct_lower_90"] < -50 and line["change_pct_upper_90"] > -25
    text = headline_text(line)
    assert text.startswith("pollux: -37.5% avg JCT vs fifo [90% t-interval over 2 seeds: ")
    one_seed = headline_text(headlines([r for r in ROWS if r["seed"] == 0], "pollux")[0])
    assert one_seed.startswith("fifo: +100.0% avg JCT vs pollux [one seed: no interval")


def test_series_styles_stay_distinct_beyond_ten_and_wider_lines_go_under() -> None:
    styles = series_styles(14)
    keys = {(s["color"], s["linestyle"], s["marker"]) for s in styles}
    assert len(keys) == 14
    widths = [s["linewidth"] for s in styles]
    orders = [s["zorder"] for s in styles]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    assert orders == sorted(orders) and len(set(orders)) == 14
    # Two series (tiresias drawn under fifo): another dash, another width.
    two = series_styles(2)
    assert two[0]["linestyle"] != two[1]["linestyle"]
    assert two[0]["linewidth"] > two[1]["linewidth"]
