"""MkDocs hook: ``results/<benchmark>.md`` and ``results/index.md``, rendered at build time from
the committed ``experiments/results/*.json`` by ``experiments/results_pages.py``, so the pages
cannot drift from the data. Nothing is written under ``docs/``; a malformed results file fails the
build with the one-line message naming the file and the field.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files


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
