"""The wheel: it builds from the sources alone, holds py.typed, the shipped data and the entry point,
keeps the models out of the base and collector installs; a clean venv with the collector extra
runs ``bayes-sched collect`` without torch (slow: it installs from the package index)."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bayes_sched", "perfmodel", "counters", "collectors")
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE", "NOTICE")


def build_wheel(folder: Path) -> Path:
    """Build the wheel from a copy of the sources (so the checkout gets no build/ folder)."""
    source = folder / "source"
    source.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(folder / "dist"), str(source)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (wheel,) = (folder / "dist").glob("bayes_sched-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_types_data_and_the_entry_point(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (info,) = {n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA")}
        metadata = email.message_from_string(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    for package in PACKAGES:
        assert f"{package}/py.typed" in names, package
        assert f"{package}/__init__.py" in names, package
    for folder in ("perfmodel/data", "bayes_sched/data"):
        shipped = {str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*") if p.is_file()}
        assert shipped and shipped <= names, sorted(shipped - names)[:5]
    assert "perfmodel/data/pollux/LICENSE" in names
    assert not any(n.startswith(("tests/", "experiments/", "deploy/")) for n in names)
    assert "bayes-sched = bayes_sched.cli:main" in entry_points
    # Models only with the models extra; the collector extra brings no torch.
    requires = metadata.get_all("Requires-Dist") or []
    base = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("torch", "pyro-ppl", "botorch", "gpytorch")) for r in base)
    assert any(r.startswith("torch") and 'extra == "models"' in r for r in requires)
    collector = [r for r in requires if 'extra == "collector"' in r]
    assert collector and not any(r.startswith("torch") for r in collector)
    assert {"collector", "models", "full", "test"} <= set(metadata.get_all("Provides-Extra") or [])


def test_torch_is_pinned_only_by_the_constraints_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    every = [*project["dependencies"],
             *(r for extra in project["optional-dependencies"].values() for r in extra)]
    assert [r for r in every if r.startswith("torch")] == ["torch>=2.2"]
    assert "torch==" in (ROOT / "constraints.txt").read_text()


@pytest.mark.slow
def test_a_clean_venv_with_the_collector_and_store_extras_collects_without_torch(
        wheel: Path, tmp_path: Path) -> None:
    # A node that collects into a store needs the collector and store extras (the store's
    # xarray, pandas and zarr left the collector extra with 62ad4b4, for the Prometheus-only
    # image; --out without them is refused in one line naming the extra).
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([str(python), "-m", "pip", "install", "--progress-bar", "off",
                             f"{wheel}[collector,store]"], capture_output=True, text=True,
                            env=env, timeout=1200, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for module in ("torch", "pyro", "botorch", "gpytorch", "matplotlib", "scipy"):
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True,
                               env=env, cwd=tmp_path)
        assert probe.returncode != 0, f"{module} is installed"
    program = environment / "bin" / "bayes-sched"
    collect = subprocess.run(
        [str(program), "collect", "--prometheus", "0", "--out", str(tmp_path / "store"),
         "--samples", "5", "--interval", "0.1s", "--sources", "nvml,pcie,perf,procfs"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert collect.returncode == 0, collect.stderr
    assert "5 samples taken, 5 written" in collect.stderr
    info = subprocess.run([str(program), "counters", "validate", str(tmp_path / "store")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert info.returncode == 0, info.stderr
