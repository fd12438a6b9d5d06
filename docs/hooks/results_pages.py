"""MkDocs hook: ``results/<benchmark>.md`` and ``results/index.md``, rendered at build time from
the committed ``experiments/results/*.json`` by ``experiments/results_pages.py``, so the pages
cannot drift from the data. Nothing is written under ``docs/``; a malformed results file fails the
build with the one-line message naming the file and the field. The nav entry
``results/index.md`` becomes a section holding the index and one page per benchmark.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files


def _nav_section(nav: list[Any], pages: list[str]) -> bool:
    """Replace the nav item whose page is ``results/index.md`` by a section of ``pages``."""
    for i, item in enumerate(nav):
        if isinstance(item, dict):
            (title, value), = item.items()
            if value == "results/index.md":
                nav[i] = {title: ["results/index.md", *pages]}
                return True
            if isinstance(value, list) and _nav_section(value, pages):
                return True
    return False


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    results = Path(config.config_file_path).resolve().parent / "experiments" / "results"
    if config.nav is not None:
        _nav_section(config.nav, [f"results/{p.stem}.md" for p in sorted(results.glob("*.json"))])
    return config


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from experiments.results_pages import results_pages
    from experiments.results_record import ResultsFormatError

    try:
        pages = results_pages()
    except ResultsFormatError as exc:
        raise PluginError(str(exc)) from None
    for name, text in pages.items():
        files.append(File.generated(config, f"results/{name}", content=text))
    return files
