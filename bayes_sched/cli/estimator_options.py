"""The command line's choice of estimators: ``--estimator``, ``--estimator-opt`` and
``[estimator.NAME]`` tables in ``--config``, read into the choices the run drivers take
(:mod:`bayes_sched.estimation.choose`).

* ``--estimator NAME`` (repeatable): the estimator ``NAME`` serves the needs it serves that the
  policy has; ``--estimator NEED=NAME``: it serves ``NEED``.
* ``--estimator-opt NAME.KEY=VALUE`` (repeatable): an option of estimator ``NAME`` (values as
  in TOML; naming an estimator's option chooses it too).
* ``[estimator.NAME]`` in ``--config``: its options as a table; flags win.

``compare`` takes the same flags for all its policies: each policy gets the choices it has a use
for (:func:`choices_for`), and a choice no policy of the run reads is refused.

Names are those of :data:`~bayes_sched.estimation.registry.ESTIMATORS` and the world's oracles
(``oracle``, ``oracle_stage``: the truth a throughput-table world supplies); ``bayes-sched list
estimators`` lists them with their options. A name or option that does not exist is one line
naming the flag or file, exit 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError
from bayes_sched.registry import parse_assignments

if TYPE_CHECKING:
    from bayes_sched.estimation.registry import EstimatorRegistry

#: The oracles a throughput-table world supplies (:func:`bayes_sched.sim.oracles.world_oracles`).
ORACLE_NAMES = ("oracle", "oracle_stage", "oracle_remaining_steps")


def add_estimator_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--estimator`` and ``--estimator-opt`` to ``parser``."""
    parser.add_argument("--estimator", action="append", default=[], metavar="[NEED=]NAME",
                        help="the estimator serving a need the policy reads (repeatable): NAME "
                             "serves its needs, NEED=NAME that one (e.g. throughput=bayes); "
                             "default: the policy's (the world's oracle for the Gavel family "
                             "and Sia); `bayes-sched list estimators` lists them")
    parser.add_argument("--estimator-opt", action="append", default=[],
                        metavar="NAME.KEY=VALUE",
                        help="an estimator option (repeatable; values as in TOML), e.g. "
                             "bayes.refit_growth=1 or oracle.table=physical")


def estimator_choices(args: argparse.Namespace, config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's choices of estimators from ``args`` (``--estimator``, ``--estimator-opt``) and
    the ``[estimator.NAME]`` tables of the ``--config`` table ``config``; options checked.

    Raises:
        InputError: an unknown need or estimator, an option it does not take or of the wrong
            type, or a malformed item (one line naming the flag or the file).
    """
    choices: dict[str, Any] = {}
    options: dict[str, dict[str, Any]] = {}
    tables = config.get("estimator", {})
    where_file = f"--config {getattr(args, 'config', '')}"
    for name, table in tables.items():
        _known(name, where_file)
        options[name] = dict(table)
    for item in getattr(args, "estimator", []):
        need, sep, name = item.partition("=")
        if not sep:
            name, need = item.strip(), ""
        name, need = name.strip(), need.strip()
        _known(name, f"--estimator {item!r}")
        if need:
            if need not in _needs():
                raise InputError(f"--estimator {item!r}: unknown need '{need}'; expected one of "
                                 f"{', '.join(_needs())}")
            choices[need] = name
        else:
            options.setdefault(name, {})
    for item in getattr(args, "estimator_opt", []):
        name, dot, rest = item.partition(".")
        if not dot or "=" in name:
            raise InputError(f"--estimator-opt {item!r}: expected NAME.KEY=VALUE")
        _known(name.strip(), f"--estimator-opt {item!r}")
        assigned = parse_assignments([rest], f"--estimator-opt {item!r}")
        options.setdefault(name.strip(), {}).update(assigned)
    for name, values in options.items():
        where = "--estimator-opt" if getattr(args, "estimator_opt", []) else where_file
        options[name] = _check(name, values, where)
    return {**options, **choices}


def choices_for(needs: Sequence[str], choices: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run's ``choices`` (:func:`estimator_choices`) a policy reading ``needs``
    has a use for: a need it reads, an estimator serving one of them. ``compare`` runs many
    policies under one set of choices; each gets its part."""
    return {key: value for key, value in choices.items()
            if key in needs or (key not in _needs() and set(_serves(key)) & set(needs))}


def check_choices_used(choices: Mapping[str, Any], needs_of: Mapping[str, Sequence[str]],
                       flag: str = "--policies") -> None:
    """Refuse a choice that none of the policies ``needs_of`` (``{policy: needs}``) reads.

    Raises:
        InputError: one line naming the choice and what each policy reads.
    """
    for key in choices:
        if not any(choices_for(needs, {key: choices[key]}) for needs in needs_of.values()):
            reads = "; ".join(f"{policy} reads {', '.join(needs) or 'no estimates'}"
                              for policy, needs in needs_of.items())
            what = f"need '{key}'" if key in _needs() else f"estimator '{key}'"
            raise InputError(f"--estimator: no policy of {flag} has a use for {what} ({reads})")


def _needs() -> tuple[str, ...]:
    from bayes_sched.estimates import NEEDS  # numpy: not at --help

    return tuple(NEEDS)


def _serves(name: str) -> tuple[str, ...]:
    return tuple(_registry_of(name).serves(name))


def _known(name: str, where: str) -> None:
    from bayes_sched.estimation.registry import ESTIMATORS

    if name not in ESTIMATORS and name not in ORACLE_NAMES:
        raise InputError(f"{where}: unknown estimator '{name}'; expected one of "
                         f"{', '.join([*ORACLE_NAMES, *ESTIMATORS])}")


def _check(name: str, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` checked against the options of estimator ``name``."""
    return _registry_of(name).check(name, values, where)


def _registry_of(name: str) -> EstimatorRegistry:
    """The registry estimator ``name`` is in: :data:`ESTIMATORS`, else the oracles a
    throughput-table world supplies (read here for their names, needs and options only)."""
    from bayes_sched.estimation.registry import ESTIMATORS

    if name in ESTIMATORS:
        return ESTIMATORS
    from bayes_sched.sim.oracles import world_oracles
    from bayes_sched.throughputs import load_gavel_throughputs

    return world_oracles(load_gavel_throughputs(), remaining_steps=no_truth)


def no_truth(name: str) -> float:
    """Stands in for a world's truth where only the oracles' names and options are read."""
    return float("nan")


__all__ = ["ORACLE_NAMES", "add_estimator_options", "check_choices_used", "choices_for",
           "estimator_choices", "no_truth"]
