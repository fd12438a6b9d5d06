"""Registries of named components (policies, hidden interference laws) with typed options.

A component's options are its factory's keyword parameters, read from its signature and type hints,
so a new constructor argument is a new option with no registry change. Options arrive as Python
values (``make_policy("pollux", p=-0.5)``), as ``key=value`` strings from the command line
(``--policy-opt p=-0.5``; values are TOML values, a bare word is a string; dotted keys reach into a
dataclass option: ``ga.population=24``), or as a TOML table. Every value is checked against its
type hint; an unknown option or a wrong type is one :class:`InputError` line naming the option
and the expected type.

Plugins: a registry may name an entry-point group (``bayes_sched.policies``,
``bayes_sched.estimators``, ``bayes_sched.laws``, ``bayes_sched.backends``); every entry point an
installed distribution declares in it is registered, lazily, the first time the registry is
listed or looked up (the entry point's value is the component's ``"module:attribute"`` path).
A plugin cannot replace a built-in of the same name: it is skipped with a warning naming its
distribution (a package silently swapping ``pollux`` would change every published comparison).
A plugin that fails to import fails when it is used, in one line naming its distribution.

Bounds live where an option is declared, in its type hint: ``Annotated[int, Range(1, 10_000)]``
(a number in a range), ``Annotated[Sequence[float], Increasing()]`` (a strictly increasing
sequence, of bounded length). The registry checks them wherever a value arrives through it, before
the component is made, so a number that sizes memory or time never reaches an allocation. Every
``float`` option is finite: NaN and infinities are refused whatever the hint.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bayes_sched.errors import InputError

LOG = logging.getLogger(__name__)

T = TypeVar("T")

_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric option, given in its type hint: ``Annotated[int, Range(1, 10_000)]``.

    ``minimum``/``maximum`` (``None``: unbounded on that side) are inclusive unless
    ``min_open``/``max_open``; ``unit`` names what the number counts, for messages.
    """

    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    max_open: bool = False
    unit: str = ""

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies within the bounds."""
        if self.minimum is not None and (value <= self.minimum if self.min_open
                                         else value < self.minimum):
            return False
        return not (self.maximum is not None and (value >= self.maximum if self.max_open
                                                  else value > self.maximum))

    def describe(self) -> str:
        """The bounds as a phrase: ``in [1, 10000]``, ``> 0``, ``in [0, 1)``."""
        low = None if self.minimum is None else _number(self.minimum)
        high = None if self.maximum is None else _number(self.maximum)
        unit = f" {self.unit}" if self.unit else ""
        if low is not None and high is not None:
            return (f"in {'(' if self.min_open else '['}{low}, {high}"
                    f"{')' if self.max_open else ']'}{unit}")
        if low is not None:
            return f"{'>' if self.min_open else '>='} {low}{unit}"
        if high is not None:
            return f"{'<' if self.max_open else '<='} {high}{unit}"
        return unit.strip()


#: A probability: a number in [0, 1].
PROBABILITY = Range(0.0, 1.0)

#: A random seed: numpy's legacy seeding and torch take 32-bit values (as ``--seed`` does).
SEED = Range(0, 2**32 - 1)

#: A count of GPUs, nodes or replicas: the readers' bound (``perfmodel.textio.MAX_GPUS``, 2^20).
GPU_COUNT = Range(1, 2**20)


def _number(value: float) -> str:
    """A bound as written: whole numbers in full (``4294967295``), others as ``%g``."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


@dataclass(frozen=True)
class Increasing:
    """A sequence option's rule, given in its type hint: its items strictly increase and it holds
    at most ``max_length`` of them (``Annotated[Sequence[float], Increasing()]``)."""

    max_length: int = 64

    def describe(self) -> str:
        return f"strictly increasing, at most {self.max_length} items"


@dataclass(frozen=True)
class Option:
    """One typed option of a component: its name, type hint and default (``Option.REQUIRED``
    when it has none)."""

    name: str
    annotation: Any
    default: Any

    REQUIRED: typing.ClassVar[object] = _EMPTY

    @property
    def type_name(self) -> str:
        return type_name(self.annotation)


#: reStructuredText's inline markup in docstrings: a role (``:class:`~a.B```) or literal text.
_ROLE = re.compile(r":[a-z]+:`~?([^`]*?)`")
_LITERAL = re.compile(r"``(.*?)``")


def plain_text(text: str) -> str:
    """``text`` with reStructuredText's inline markup taken out, for a terminal: a role shows its
    target's last name (``:class:`~a.B``` -> ``B``), literal text its content."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if "." in m.group(1)
                     and " " not in m.group(1) else m.group(1), text)
    return _LITERAL.sub(r"\1", text)


class Registry(Mapping[str, Callable[..., T]], Generic[T]):
    """Named factories of one kind of component; a read-only mapping name -> factory.

    Args:
        kind: what the components are, for messages (``"policy"``).
        group: the entry-point group whose plugins join the registry (see the module);
            ``None``: built-ins only.
    """

    def __init__(self, kind: str, group: str | None = None) -> None:
        self.kind = kind
        self.group = group
        self._factories: dict[str, Callable[..., T]] = {}
        self._lazy: dict[str, str] = {}
        self._order: list[str] = []
        self._summaries: dict[str, str] = {}
        self._plugins: dict[str, str] = {}  # name -> the distribution that provides it
        self._plugins_loaded = group is None

    def _load_plugins(self) -> None:
        """Register the group's entry points (once; see the module)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points

        for point in entry_points(group=self.group or ""):
            dist = point.dist.name if point.dist is not None else "an unknown distribution"
            if point.name in self._factories or point.name in self._lazy:
                LOG.warning("%s plugin '%s' of %s skipped: a %s of that name is built in or "
                            "installed already", self.kind, point.name, dist, self.kind)
                continue
            self._plugins[point.name] = dist
            self._register_plugin(point.name, point.value)

    def _register_plugin(self, name: str, path: str) -> None:
        """Register the plugin ``name`` found at ``path`` (``"module:attribute"``), lazily."""
        self.register(name, path)

    def plugin_of(self, name: str) -> str | None:
        """The distribution that provides ``name``, ``None`` for a built-in."""
        self._load_plugins()
        return self._plugins.get(name)

    def register(self, name: str, factory: Callable[..., T] | str, summary: str = "") -> None:
        """Add ``factory`` under ``name``; its keyword parameters become its options.

        ``factory`` may be a ``"module:attribute"`` path, imported when the component is first made
        or its options are read, so that listing names (``--help``) loads no heavy module.
        """
        if name in self._factories or name in self._lazy:
            raise ValueError(f"{self.kind} '{name}' is already registered")
        self._order.append(name)
        if isinstance(factory, str):
            self._lazy[name] = factory
            if summary:
                self._summaries[name] = summary
            return
        self._add(name, factory, summary)

    def _add(self, name: str, factory: Callable[..., T], summary: str = "") -> None:
        factory_options(factory)  # type hints must resolve (options are checked against them)
        self._factories[name] = factory
        doc = inspect.getdoc(factory) or inspect.getdoc(inspect.getmodule(factory)) or ""
        self._summaries[name] = summary or plain_text(
            doc.split("\n\n")[0].replace("\n", " ").split(". ")[0])

    def _factory(self, name: str) -> Callable[..., T]:
        self._load_plugins()
        if name in self._lazy:
            path = self._lazy[name]
            module, _, attribute = path.partition(":")
            try:
                factory = getattr(importlib.import_module(module), attribute)
            except (ImportError, AttributeError) as error:
                if name not in self._plugins:
                    raise
                raise InputError(f"{self.kind} '{name}' (plugin: {self._plugins[name]}): cannot "
                                 f"load {path}: {error}") from None
            del self._lazy[name]
            self._add(name, factory, self._summaries.get(name, ""))
            if name in self._plugins:
                self._summaries[name] += f" (plugin: {self._plugins[name]})"
        return self._factories[name]

    # --- Mapping -----------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Callable[..., T]:
        self._load_plugins()
        if name not in self._factories and name not in self._lazy:
            raise KeyError(name)
        return self._factory(name)

    def __iter__(self) -> Iterator[str]:
        self._load_plugins()
        return iter(list(self._order))

    def __len__(self) -> int:
        self._load_plugins()
        return len(self._order)

    # --- options -----------------------------------------------------------------------------

    def summary(self, name: str) -> str:
        """The component's one-line summary (a plugin that cannot load says so instead)."""
        known = self._known(name)
        if known not in self._summaries:
            try:
                self._factory(known)
            except InputError as error:
                if known not in self._plugins:
                    raise
                return str(error)
        return self._summaries[known]

    def options(self, name: str) -> dict[str, Option]:
        """The options of ``name`` in signature order."""
        return factory_options(self._factory(self._known(name)))

    def make(self, name: str, /, where: str = "", context: Mapping[str, Any] | None = None,
             **options: Any) -> T:
        """A fresh component ``name`` with ``options`` (checked and converted to their types).

        ``context`` gives values the caller knows (a seed, the cluster's topology): each is passed
        where the factory takes a parameter of that name and the options do not set it.
        ``where`` prefixes error messages (a flag or file).
        """
        factory = self._factory(self._known(name, where))
        accepted = factory_options(factory)
        values = self.check(name, options, where)
        for key, value in (context or {}).items():
            if key in accepted and key not in values:
                values[key] = value
        try:
            return factory(**values)
        except InputError:
            raise
        except ValueError as error:
            raise InputError(f"{_prefix(where)}{self.kind} '{name}': {error}") from None

    def check(self, name: str, options: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """``options`` checked against the option types of ``name`` and converted to them."""
        accepted = self.options(name)
        out: dict[str, Any] = {}
        for key, value in options.items():
            label = f"{_prefix(where)}{self.kind} '{name}'"
            if key not in accepted:
                known = ", ".join(accepted) if accepted else "none"
                raise InputError(f"{label} has no option '{key}'; its options: {known}",
                                 column=None)
            option = accepted[key]
            out[key] = coerce(value, option.annotation, f"{label}: option {key}",
                              option.default)
        return out

    def parse(self, name: str, items: Sequence[str], where: str = "") -> dict[str, Any]:
        """``key=value`` strings (values as TOML values, dotted keys into dataclass options)
        checked against the options of ``name``."""
        return self.check(name, parse_assignments(items, where), where)

    def _known(self, name: str, where: str = "") -> str:
        self._load_plugins()
        if name not in self._factories and name not in self._lazy:
            raise InputError(f"{_prefix(where)}unknown {self.kind} '{name}': expected one of "
                             f"{', '.join(self)}")
        return name


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def factory_options(factory: Callable[..., Any]) -> dict[str, Option]:
    """The keyword options of a class or function: name -> :class:`Option`, from its signature
    and resolved type hints (parameters and fields starting with ``_`` are not options)."""
    if isinstance(factory, type):
        target: Any = factory if dataclasses.is_dataclass(factory) else vars(factory).get(
            "__init__", factory)
    else:
        target = factory
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except NameError as error:  # a programming error: options would go unchecked
        raise TypeError(f"cannot resolve the type hints of {factory!r}: {error}") from None
    out: dict[str, Option] = {}
    for parameter in inspect.signature(factory).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) \
                or parameter.name.startswith("_"):
            continue
        out[parameter.name] = Option(parameter.name, hints.get(parameter.name, Any),
                                     parameter.default)
    return out


def parse_value(text: str) -> Any:
    """A command-line value as TOML reads it (``-1``, ``0.5``, ``true``, ``[1, 2]``,
    ``{a = 1}``); anything else is the string itself."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def parse_assignments(items: Sequence[str], where: str = "") -> dict[str, Any]:
    """``["a=1", "ga.seed=2"]`` -> ``{"a": 1, "ga": {"seed": 2}}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"{_prefix(where)}{item!r}: expected key=value")
        *parents, leaf = key.split(".")
        table = out
        for part in parents:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise InputError(f"{_prefix(where)}{item!r}: '{part}' is set as a value and a "
                                 "table")
        table[leaf] = parse_value(text.strip())
    return out


def type_name(annotation: Any) -> str:
    """A readable name of a type hint: ``float``, ``int or None``, ``sequence of float``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        rules = [rule.describe() for rule in annotation.__metadata__
                 if isinstance(rule, Range | Increasing)]
        return " ".join([type_name(args[0]), *rules])
    if annotation is Any:
        return "any value"
    if annotation is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (tuple, list, Sequence) or annotation in (tuple, list):
        return f"sequence of {type_name(args[0])}" if args else "sequence"
    if origin in (dict, Mapping) or annotation in (dict,):
        return f"table of {type_name(args[0])} = {type_name(args[1])}" if args else "table"
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return f"{annotation.__name__} table"
    return getattr(annotation, "__name__", str(annotation))


def coerce(value: Any, annotation: Any, where: str, default: Any = _EMPTY) -> Any:
    """``value`` converted to ``annotation``; raises :class:`InputError` naming ``where`` and the
    expected type. A table for a dataclass option updates its default (or builds one)."""

    def wrong() -> InputError:
        return InputError(f"{where} is {value!r}: expected {type_name(annotation)}")

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        plain = coerce(value, args[0], where, default)
        if not all(_obeys(plain, rule) for rule in annotation.__metadata__):
            raise wrong()
        return plain
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            if type(None) in args:
                return None
            raise wrong()
        failures = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where, default)
            except InputError as failure:
                failures.append(failure)
        if len(failures) == 1 and len(args) == 2:  # X or None: X's reason, and None
            raise InputError(f"{failures[0]} or None") from None
        raise wrong()
    if origin is typing.Literal:
        if value in args:
            return value
        raise wrong()
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise wrong()
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        raise wrong()
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong()
        if isinstance(value, int) and abs(value) < 2**1023 or math.isfinite(value):
            return float(value)
        raise InputError(f"{where} is {value!r}: expected a finite number")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise wrong()
    if origin in (tuple, list, Sequence) or annotation in (tuple, list):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise wrong()
        item = args[0] if args else Any
        items = [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return list(items) if origin is list else tuple(items)
    if origin in (dict, Mapping) or annotation is dict:
        if not isinstance(value, Mapping):
            raise wrong()
        key_type, value_type = args if args else (Any, Any)
        return {coerce(k, key_type, f"{where} key"): coerce(v, value_type, f"{where}.{k}")
                for k, v in value.items()}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise wrong()
        fields = factory_options(annotation)
        converted: dict[str, Any] = {}
        for key, item in value.items():
            if key not in fields:
                raise InputError(f"{where} has no field '{key}'; its fields: "
                                 f"{', '.join(fields)}")
            converted[key] = coerce(item, fields[key].annotation, f"{where}.{key}",
                                    fields[key].default)
        try:
            if isinstance(default, annotation):
                return dataclasses.replace(default, **converted)
            return annotation(**converted)
        except (TypeError, ValueError) as error:
            raise InputError(f"{where}: {error}") from None
    if isinstance(annotation, type):
        if isinstance(value, annotation):
            return value
        raise wrong()
    return value


def _obeys(value: Any, rule: Any) -> bool:
    """Whether a converted option value obeys one rule of its ``Annotated`` hint (rules of other
    kinds are not the registry's and pass)."""
    if isinstance(rule, Range):
        return value is None or rule.holds(value)
    if isinstance(rule, Increasing):
        items = list(value)
        return len(items) <= rule.max_length and all(
            a < b for a, b in zip(items, items[1:], strict=False))
    return True


def check_fields(instance: Any, label: str) -> None:
    """Check a dataclass instance's fields against the rules of their ``Annotated`` hints (and
    every ``float`` field for finiteness), for code that builds it directly rather than through
    a registry; raises ``ValueError`` naming ``label.field``, the value and what was expected.
    Types are not checked here (numpy integers pass)."""
    hints = typing.get_type_hints(type(instance), include_extras=True)
    for item in dataclasses.fields(instance):
        hint, value = hints.get(item.name, Any), getattr(instance, item.name)
        rules = hint.__metadata__ if typing.get_origin(hint) is typing.Annotated else ()
        plain = typing.get_args(hint)[0] if rules else hint
        finite = plain is not float or value is None or math.isfinite(value)
        if not finite or not all(_obeys(value, rule) for rule in rules):
            raise ValueError(f"{label}.{item.name} is {value!r}: expected {type_name(hint)}"
                             + ("" if finite else " (a finite number)"))
