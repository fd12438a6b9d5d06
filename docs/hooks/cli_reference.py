"""MkDocs hook: pages generated at build time from the code, so they cannot drift from it.

* ``reference/cli.md``: every sub-command's ``--help``, from the parser the command line builds
  (:func:`bayes_sched.cli.build_parser`, which imports each command's module but no torch).
* ``reference/<package>.md``: one mkdocstrings block per public name of ``perfmodel``,
  ``counters``, ``collectors`` and ``bayes_sched``, read from each package's ``_EXPORTS`` table
  (the packages load their exports lazily, so importing them here costs nothing).

The pages exist only in the build (``File.generated``); nothing is written under ``docs/``.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Iterator
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

#: Width of the generated help text (argparse reads COLUMNS), fixed so that the page does not
#: depend on the terminal the build runs in.
HELP_COLUMNS = "100"

#: Package -> one line on what its API page holds.
API_PACKAGES = {
    "perfmodel": "Throughput, efficiency and goodput models, profile readers and fit reports.",
    "counters": "The counter catalog, dataset schema, stores, rates and alignment.",
    "collectors": "The node collector's sources, daemon and Prometheus endpoint.",
    "bayes_sched": "Policies, the simulator and the errors the command line reports.",
}


def _subcommands(parser: argparse.ArgumentParser, prefix: str
                 ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) under ``parser``, depth first, in the order --help lists."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                path = f"{prefix} {choice.dest}"
                yield path, sub
                yield from _subcommands(sub, path)


def cli_reference() -> str:
    """The command-line reference page: the top-level help, then each sub-command's."""
    from bayes_sched.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        lines = ["# Command-line reference", "",
                 "Generated from the parser at build time (`bayes-sched COMMAND --help` prints "
                 "the same). Durations take `30`, `30s`, `5m` or `1h` where a flag says so.", "",
                 "## bayes-sched", "", "```text", parser.format_help().rstrip(), "```", ""]
        for path, sub in _subcommands(parser, "bayes-sched"):
            lines += [f"## {path}", "", "```text", sub.format_help().rstrip(), "```", ""]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(lines)


def api_reference(package: str) -> str:
    """One package's API page: a mkdocstrings block per exported name, at its defining module."""
    exports: dict[str, str] = importlib.import_module(package)._EXPORTS
    lines = [f"# {package}", "", API_PACKAGES[package], "",
             f"Every name below imports from the package top (`from {package} import NAME`).", ""]
    for name, module in exports.items():
        lines += [f"::: {module}.{name}", ""]
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    for package in API_PACKAGES:
        files.append(File.generated(config, f"reference/{package}.md",
                                    content=api_reference(package)))
    return files
