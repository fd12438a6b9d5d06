"""Choosing a run's estimators outside the policy: its needs, the user's choices, the world's oracles.

A policy states what it reads (``needs``) and, as plain data, which estimator serves a need
when the user names none (``default_estimators``, e.g. ``{"throughput": "oracle"}`` for the
Gavel family, which reads the measured table as Gavel does). The user's choices are a mapping
``{need or estimator name: options}``:

* ``{"throughput": "bayes"}``: the need ``throughput`` is served by the estimator ``bayes``;
* ``{"bayes": {"refit_growth": 1.0}}``: the estimator ``bayes``, with options, serves the needs
  it serves (:meth:`~bayes_sched.estimation.registry.EstimatorRegistry.serves`) that the policy
  has;
* ``{"throughput": {"name": "bayes", "refit_growth": 1.0}}``: both at once.

A name is looked up first among the world's oracles (the truth it supplies, labelled
``oracle``), then in :data:`~bayes_sched.estimation.registry.ESTIMATORS`. A choice the policy
has no use for (a need it does not declare, an estimator serving none of its needs) is refused,
not ignored. Each need gets at most one estimator; a need with neither a choice nor a default
goes unserved (the policy runs without that estimate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bayes_sched.errors import InputError
from bayes_sched.estimates import NEEDS
from bayes_sched.estimation import Estimator
from bayes_sched.estimation.registry import ESTIMATORS, EstimatorRegistry

#: The user's choices: ``{need: estimator name}``, ``{estimator name: {option: value}}`` or
#: ``{need: {"name": estimator name, option: value}}``.
Choices = Mapping[str, str | Mapping[str, Any]]


def resolve_choices(needs: Sequence[str], choices: Choices | None,
                    defaults: Mapping[str, str], registries: Sequence[EstimatorRegistry],
                    where: str = "") -> dict[str, tuple[str, dict[str, Any]]]:
    """``{need: (estimator name, raw options)}`` for the needs ``needs`` given ``choices`` and the
    policy's ``defaults`` (see the module); names looked up in ``registries`` in order.

    Raises:
        InputError: a need the policy does not declare, an unknown estimator, or one that
            serves none of the policy's needs (one line, prefixed by ``where``).
    """
    prefix = f"{where}: " if where else ""
    named: dict[str, tuple[str, dict[str, Any]]] = {}
    options_of: dict[str, dict[str, Any]] = {}
    for key, value in (choices or {}).items():
        if key in NEEDS:
            if key not in needs:
                raise InputError(f"{prefix}need '{key}': the policy reads "
                                 f"{', '.join(needs) or 'no estimates'}")
            if isinstance(value, str):
                named[key] = (value, {})
            else:
                options = dict(value)
                name = options.pop("name", None)
                if not isinstance(name, str):
                    raise InputError(f"{prefix}need '{key}': expected an estimator name "
                                     "(name = \"...\") beside its options")
                named[key] = (name, options)
        else:
            if not isinstance(value, Mapping):
                raise InputError(f"{prefix}estimator '{key}': expected a table of options, got "
                                 f"{value!r}")
            _registry(key, registries, prefix)
            options_of[key] = dict(value)
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for need in needs:
        if need in named:
            out[need] = named[need]
            continue
        serving = [name for name in options_of
                   if need in _registry(name, registries, prefix).serves(name)]
        if len(serving) > 1:
            raise InputError(f"{prefix}estimators {', '.join(serving)} all serve '{need}': "
                             "choose one")
        if serving:
            out[need] = (serving[0], {})
        elif need in defaults:
            out[need] = (defaults[need], {})
    for need, (name, options) in out.items():
        registry = _registry(name, registries, prefix)
        if need not in registry.serves(name):
            raise InputError(f"{prefix}estimator '{name}' serves "
                             f"{', '.join(registry.serves(name))}, not '{need}'")
        out[need] = (name, {**options_of.get(name, {}), **options})
    unused = [name for name in options_of if name not in {n for n, _ in out.values()}]
    if unused:
        name = unused[0]
        served = ", ".join(_registry(name, registries, prefix).serves(name))
        raise InputError(f"{prefix}estimator '{name}' serves {served}: the policy reads "
                         f"{', '.join(needs) or 'no estimates'}")
    return out


def _registry(name: str, registries: Sequence[EstimatorRegistry],
              prefix: str) -> EstimatorRegistry:
    for registry in registries:
        if name in registry:
            return registry
    known = [n for registry in registries for n in registry]
    raise InputError(f"{prefix}unknown estimator '{name}': expected one of {', '.join(known)}")


def choose_estimators(needs: Sequence[str], choices: Choices | None = None,
                      defaults: Mapping[str, str] | None = None,
                      oracles: EstimatorRegistry | None = None, seed: int = 0,
                      context: Mapping[str, Any] | None = None,
                      where: str = "") -> list[Estimator]:
    """Fresh estimators for ``needs``, in the order of the needs (one per estimator, serving
    every need it was chosen for): the user's ``choices``, else the policy's ``defaults``;
    names from the world's ``oracles`` first, then :data:`ESTIMATORS`. ``seed`` (and
    ``context``'s values) go to the factories that take them.

    Raises:
        InputError: see :func:`resolve_choices`; an option an estimator does not take, or of the
            wrong type.
    """
    registries = [r for r in (oracles, ESTIMATORS) if r is not None]
    chosen = resolve_choices(needs, choices, defaults or {}, registries, where)
    made: dict[str, Estimator] = {}
    for name, options in chosen.values():
        if name not in made:
            registry = _registry(name, registries, f"{where}: " if where else "")
            made[name] = registry.make(name, where=where,
                                       context={"seed": seed, **(context or {})}, **options)
    return list(made.values())


def policy_estimators(policy: object, choices: Choices | Sequence[Estimator] | None = None,
                      oracles: EstimatorRegistry | None = None, seed: int = 0,
                      where: str = "") -> list[Estimator]:
    """The estimators a run of ``policy`` runs: :func:`choose_estimators` for its ``needs`` and
    ``default_estimators`` given the user's ``choices``; estimator objects already made, when
    ``choices`` is a sequence of them (a Python caller's own).

    Raises:
        InputError: as :func:`choose_estimators`.
    """
    if choices is not None and not isinstance(choices, Mapping):
        return list(choices)
    return choose_estimators(tuple(getattr(policy, "needs", ())), choices,
                             getattr(policy, "default_estimators", None), oracles, seed,
                             where=where)


__all__ = ["Choices", "choose_estimators", "policy_estimators", "resolve_choices"]
