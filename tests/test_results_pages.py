"""The benchmark results pages: ``experiments/results_record.py`` writes a record and
``experiments/results_pages.py`` renders and checks the files, each run as a user runs it
(a subprocess; nothing imports experiments)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PAGES = ["experiments/results_pages.py"]

SCRIPT = '''"""Seconds per widget at each size, against the old widget.

More on the setting.
"""
'''

RECORD = {
    "command": "python experiments/bench_widget.py --sizes 4 8",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "dirty": False,
    "date": "2026-11-30T12:34:56Z",
    "load": [3.25, 2.5, 2.0],
    "cpu_s": 41.5,
    "machine": {"cpu": "Test CPU", "cores": 2},
    "source": "run",
    "note": None,
    "tables": [{"title": "widgets", "rows": [{"size": 4, "widget_s": 0.125},
                                             {"size": 8, "widget_s": 0.5}]}],
}


def _pages(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *PAGES, *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)


def _folder(tmp_path: Path, records: list[dict]) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "bench_widget.py").write_text(SCRIPT)
    (tmp_path / "results" / "bench_widget.json").write_text(
        json.dumps({"benchmark": "bench_widget", "records": records}))
    return tmp_path


def test_a_record_renders_with_its_provenance_newest_first(tmp_path: Path) -> None:
    older = {**RECORD, "date": "2026-01-02T00:00:00Z", "load": 19, "cpu_s": None,
             "machine": None, "commit": "abcdef1", "source": "transcribed from docstring",
             "tables": [{"title": "", "rows": [{"size": 4, "old_s": 9.0}]}]}
    folder = _folder(tmp_path, [older, RECORD])
    done = _pages("--experiments", str(folder), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "bench_widget.md").read_text()
    assert "Seconds per widget at each size, against the old widget." in page
    assert "More on the setting" not in page
    assert "`python experiments/bench_widget.py --sizes 4 8`" in page
    assert "`0123456789`" in page and "2026-11-30T12:34:56Z" in page
    assert "3.25 / 2.50 / 2.00" in page and "41.5 s" in page and "Test CPU, 2 cores" in page
    assert "| size | widget_s |" in page and "| 8 | 0.5 |" in page
    assert page.index("2026-11-30") < page.index("2026-01-02")  # newest first
    assert "transcribed from docstring" in page and "load average at start: 19" in page
    index = (tmp_path / "out" / "index.md").read_text()
    assert "[bench_widget](bench_widget.md)" in index and "2026-11-30" in index


def test_a_malformed_file_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    bad = {**RECORD, "date": "yesterday"}
    folder = _folder(tmp_path, [RECORD, bad])
    done = _pages("--experiments", str(folder))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "bench_widget.json" in done.stderr and "records[1].date" in done.stderr
    missing = {k: v for k, v in RECORD.items() if k != "commit"}
    (folder / "results" / "bench_widget.json").write_text(
        json.dumps({"benchmark": "bench_widget", "records": [missing]}))
    done = _pages("--experiments", str(folder))
    assert done.returncode == 2 and "records[0].commit" in done.stderr
    (folder / "results" / "bench_widget.json").write_text('{"benchmark": "bench_widget", ')
    done = _pages("--experiments", str(folder))
    assert done.returncode == 2 and "bench_widget.json: not JSON" in done.stderr


def test_record_results_appends_a_record_that_renders(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [RECORD])
    code = ("import sys; from experiments.results_record import record_results; "
            "from pathlib import Path; sys.argv = ['experiments/bench_widget.py', '--record', '-n', '3']; "
            "record_results('bench_widget.py', {'t': [{'n': 3, 'took_s': 1.5}], 'empty': []}, "
            f"results_dir=Path({str(folder / 'results')!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads((folder / "results" / "bench_widget.json").read_text())
    new = data["records"][-1]
    assert len(data["records"]) == 2
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:
        assert new["commit"] == head.stdout.strip()
    assert new["command"] == "python experiments/bench_widget.py -n 3"
    # The table without rows is left out (the results files require rows).
    assert new["tables"] == [{"title": "t", "rows": [{"n": 3, "took_s": 1.5}]}]
    assert len(new["load"]) == 3 and new["cpu_s"] > 0 and new["machine"]["cores"] >= 1
    assert _pages("--experiments", str(folder)).returncode == 0


def test_every_committed_results_file_validates() -> None:
    done = _pages()
    assert done.returncode == 0, done.stderr
