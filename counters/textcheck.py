"""Bounds for the text the collectors parse (``perf stat`` output, procfs files).

This is the collectors' counterpart of :mod:`perfmodel.textio`, the validation layer under every
user-file reader. Two exist because of the import rules: collectors depend on counters only and
must stay light (no perfmodel, no numpy-heavy readers), so the few checks they need live here, in
the package they may import. Both refuse the same things: JSON nested deeper than a small bound
(checked before parsing, so the parser never recurses into a RecursionError), integers of more
digits than an int64 holds, NaN/Infinity literals, and non-finite or out-of-range numbers.

Every function raises a plain :class:`ValueError` saying what was expected; each parser wraps it in
its own error type with the line it was reading.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: JSON nesting deeper than this is refused (a ``perf stat -j`` record is one flat object).
MAX_JSON_DEPTH = 8
#: Integer literals with more digits than this are refused (2^63 has 19 digits).
MAX_INT_DIGITS = 19


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text``, strings skipped, without
    parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def loads_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON ``text`` within the bounds above; raises ValueError."""
    if json_depth(text) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return json.loads(text, parse_int=_int_literal, parse_constant=_constant)


def _int_literal(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text.lstrip('-'))} digits: expected at most "
                         f"{MAX_INT_DIGITS}")
    return int(text)


def _constant(name: str) -> float:
    raise ValueError(f"{name}: expected a finite number")


def finite_number(raw: Any, minimum: float = -math.inf, maximum: float = math.inf) -> float:
    """``raw`` (a number or its text; not a boolean) as a finite float in ``[minimum, maximum]``;
    raises ValueError('expected ...')."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"expected a number, found {raw!r}")
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        raise ValueError(f"expected a number, found {raw!r}") from None
    if not math.isfinite(value) or not minimum <= value <= maximum:
        bounds = f"in [{minimum:g}, {maximum:g}]" if math.isfinite(maximum) else (
            f">= {minimum:g}" if math.isfinite(minimum) else "")
        raise ValueError(f"expected a finite number {bounds}, found {raw!r}".replace("  ", " "))
    return value
