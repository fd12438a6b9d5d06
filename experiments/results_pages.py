"""Render the committed benchmark results (``experiments/results/*.json``) as Markdown pages.

One page per benchmark (``<benchmark>.md``: what it measures, from the first paragraph of the
script's docstring; how to re-measure; then one section per record, newest first, each with its
command, commit, date, load, CPU time and machine, and its tables) and an ``index.md``. The docs
build calls :func:`results_pages` from ``docs/hooks/results_pages.py``, so the pages under
``docs/results/`` exist only in the built site and cannot go stale. The record format is
``experiments/results_record.py``'s.

    python experiments/results_pages.py                 # check every results file
    python experiments/results_pages.py --out /tmp/results-pages   # and write the pages

A malformed file stops it with one line naming the file and the field, exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.results_record import ResultsFile, ResultsFormatError, load_results  # noqa: E402
from perfmodel.markdown import markdown_table  # noqa: E402

EXPERIMENTS_DIR = Path(__file__).resolve().parent

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def summary(script: Path) -> str:
    """The first paragraph of ``script``'s docstring, on one line, roles shown as code."""
    if not script.exists():
        raise ResultsFormatError(f"{script}: no such benchmark script for its results file")
    doc = ast.get_docstring(ast.parse(script.read_text(), filename=str(script))) or ""
    first = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return _ROLE.sub(r"`\1`", first).replace("``", "`")


def _load(load: Any) -> str:
    if load is None:
        return "not recorded"
    if isinstance(load, list):
        return " / ".join(f"{v:.2f}" for v in load) + " (1 / 5 / 15 min)"
    return f"{load:g}"


def _record_section(record: dict[str, Any]) -> list[str]:
    commit = record["commit"]
    short = "unknown" if commit is None else f"`{commit[:10]}`"
    if record["dirty"]:
        short += " (with uncommitted changes)"
    machine = record["machine"]
    cpu = "not recorded" if record["cpu_s"] is None else f"{record['cpu_s']:g} s"
    where = "not recorded" if machine is None else f"{machine['cpu']}, {machine['cores']} cores"
    command = "not stated" if record["command"] is None else f"`{record['command']}`"
    facts = [f"- command: {command}",
             f"- commit: {short}; date: {record['date']}; load average at start: "
             f"{_load(record['load'])}",
             f"- CPU time: {cpu}; machine: {where}; source: {record['source']}"]
    if record["note"]:
        facts.append(f"- note: {record['note']}")
    lines = [f"## {record['date'][:16].replace('T', ' ')} UTC, commit "
             f"{'unknown' if commit is None else commit[:7]}", "", *facts, ""]
    for table in record["tables"]:
        if "text" in table:
            lines += ([f"**{table['title']}**", ""] if table["title"] else [])
            lines += ["```text", table["text"].rstrip(), "```", ""]
            continue
        columns = list(dict.fromkeys(c for row in table["rows"] for c in row))
        rows = [{c: row.get(c) for c in columns} for row in table["rows"]]
        if table["title"]:
            lines += [f"**{table['title']}**", ""]
        lines += [markdown_table(rows, columns), ""]
    return lines


def benchmark_page(results: ResultsFile, about: str) -> str:
    """One benchmark's page: what it measures, then its records newest first."""
    name = results.benchmark
    records = sorted(results.records, key=lambda r: r["date"], reverse=True)
    lines = [f"# {name}", "", about, "",
             f"Script `experiments/{name}.py`; data `experiments/results/{name}.json` "
             f"({len(records)} record{'s' * (len(records) != 1)}), rendered when the docs are "
             "built. A run with `--record` appends a record; the figures are the machine's at "
             "the load shown, so compare rows within one record.", ""]
    for record in records:
        lines += _record_section(record)
    return "\n".join(lines)


def index_page(files: list[ResultsFile], abouts: dict[str, str]) -> str:
    """The index: one row per benchmark with its latest record's date and commit."""
    lines = ["# Measured figures", "",
             "Each benchmark's recorded runs, from `experiments/results/<benchmark>.json`, "
             "newest first. Records marked *transcribed from docstring* are figures that the "
             "scripts' and modules' docstrings used to carry, with the commit that wrote them.",
             "", "| benchmark | measures | records | latest |", "|---|---|---|---|"]
    for results in files:
        latest = max(r["date"] for r in results.records)
        first = abouts[results.benchmark].split(". ", 1)[0].rstrip(".")
        lines.append(f"| [{results.benchmark}]({results.benchmark}.md) | {first} | "
                     f"{len(results.records)} | {latest[:10]} |")
    return "\n".join(lines) + "\n"


def results_pages(experiments_dir: Path = EXPERIMENTS_DIR) -> dict[str, str]:
    """Page name (``index.md``, ``<benchmark>.md``) -> Markdown, for every results file."""
    files = [load_results(p) for p in sorted((experiments_dir / "results").glob("*.json"))]
    abouts = {f.benchmark: summary(experiments_dir / f"{f.benchmark}.py") for f in files}
    pages = {"index.md": index_page(files, abouts)}
    for results in files:
        pages[f"{results.benchmark}.md"] = benchmark_page(results, abouts[results.benchmark])
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--experiments", type=Path, default=EXPERIMENTS_DIR,
                        help="the folder of the scripts, with results/ inside (default: this one)")
    parser.add_argument("--out", type=Path, help="write the pages into this folder")
    args = parser.parse_args(argv)
    try:
        pages = results_pages(args.experiments)
    except (ResultsFormatError, OSError, SyntaxError) as exc:
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, text in pages.items():
            (args.out / name).write_text(text)
    print(f"{len(pages) - 1} results files: ok" + (f"; pages in {args.out}" if args.out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
