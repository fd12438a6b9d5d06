"""The reports' Markdown tables: missing values show as '-', as on the command line."""

from __future__ import annotations

import math

from perfmodel.markdown import markdown_cell, markdown_table


def test_a_missing_value_is_a_dash_and_numbers_keep_four_digits() -> None:
    assert markdown_cell(None) == markdown_cell(math.nan) == "-"
    assert markdown_cell(1464.0e1) == "1.464e+04" and markdown_cell(3) == "3"
    assert markdown_cell(math.inf) == "inf"


def test_a_table_follows_the_columns_given_or_the_first_rows_keys() -> None:
    rows = [{"job": "a", "jct": 12.3456, "restarts": 0}, {"job": "b", "jct": math.nan,
                                                           "restarts": None}]
    assert markdown_table(rows).splitlines() == [
        "| job | jct | restarts |", "|---|---|---|", "| a | 12.35 | 0 |", "| b | - | - |"]
    assert markdown_table(rows, ["restarts", "job"]).splitlines()[2] == "| 0 | a |"
