"""``bayes-sched infer contention`` on stores it must refuse, before any fit (issue 14, items 10, 16).

Real stores written by the toolkit's own writer, real subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayes_sched.contention.inference import prepare
from bayes_sched.sim.laws.contention_generator import GeneratorConfig, generate
from bayes_sched.topology import NodeTopology
from counters.errors import CountersError
from counters.store import write_store

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bayes_sched", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def _counters() -> xr.Dataset:
    return generate(GeneratorConfig(num_nodes=1, num_samples=20, seed=3)).counters


def _filled(ds: xr.Dataset, value: float) -> xr.Dataset:
    """Every measured value replaced by ``value`` (NaN: marked missing, as a collector would)."""
    bad = ds.copy(deep=True)
    for name in list(bad.data_vars):
        if np.issubdtype(bad[name].dtype, np.floating):
            bad[name] = bad[name].where(bad[name].isnull() & ~np.isnan(value), value)
            if np.isnan(value) and f"{name}_valid" in bad:
                bad[f"{name}_valid"][...] = False
    return bad


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("stores")
    ds = _counters()
    paths = {"good": base / "good", "nan": base / "all-nan", "huge": base / "minus-1e30"}
    write_store(ds, paths["good"])
    write_store(_filled(ds, np.nan), paths["nan"])
    write_store(_filled(ds, -1e30), paths["huge"])
    (base / "a-file.txt").write_text("not a folder\n")
    paths["file"] = base / "a-file.txt"
    return paths


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_prepare_refuses_a_window_without_any_finite_counter() -> None:
    with pytest.raises(CountersError, match=r"node-x: no finite sample .* nothing to infer"):
        prepare(_filled(_counters(), np.nan), NodeTopology(), where="node-x")


def test_prepare_refuses_counters_far_beyond_capacity() -> None:
    with pytest.raises(CountersError,
                       match=r"node-x: PCIe traffic .* is -2e\+21 at time=.*expected values in"):
        prepare(_filled(_counters(), -1e30), NodeTopology(), where="node-x")
    prepare(_counters(), NodeTopology(), where="node-x")  # the healthy window passes


def test_all_nan_store_is_refused_naming_it(stores: dict[str, Path], tmp_path: Path) -> None:
    # Item 16: the prior alone used to print a confident bottleneck table, exit 0.
    result = run_cli("infer", "contention", str(stores["nan"]), "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert str(stores["nan"]) in _one_line(result) and "no finite sample" in result.stderr
    assert result.stdout == "" and not (tmp_path / "r").exists()


def test_store_of_minus_1e30_is_refused_before_the_fit(stores: dict[str, Path],
                                                       tmp_path: Path) -> None:
    # Item 10: the fit's Cholesky factorisation failed with a traceback.
    result = run_cli("infer", "contention", str(stores["huge"]), "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert str(stores["huge"]) in _one_line(result) and "expected values in" in result.stderr


@pytest.mark.parametrize("args, flag", [
    (("--steps", "0"), "--steps"),
    (("--steps", "-1"), "--steps"),
    (("--seed", "-1"), "--seed"),
    (("--out", "FILE"), "--out"),
    (("--out", "FILE/sub"), "--out"),
])
def test_bad_options_are_refused_before_the_fit(stores: dict[str, Path], tmp_path: Path,
                                                args: tuple[str, ...], flag: str) -> None:
    # Item 10: --steps 0 gave a traceback; an unusable --out was found only after the fit.
    args = tuple(a.replace("FILE", str(stores["file"])) for a in args)
    if "--out" not in args:
        args = (*args, "--out", str(tmp_path / "r"))
    start = time.perf_counter()
    result = run_cli("infer", "contention", str(stores["good"]), *args)
    assert result.returncode == 2
    assert flag in _one_line(result)
    assert result.stdout == ""
    assert time.perf_counter() - start < 120


#: Runs ``infer contention`` with the arguments of argv[1:] in a fresh interpreter, then prints
#: its exit status and whether torch was imported.
_WITHOUT_TORCH = """
import sys
from bayes_sched.cli import main
status = main(["infer", "contention", *sys.argv[1:]])
print(status, "torch" in sys.modules)
"""


@pytest.mark.parametrize("case", ["bad topology", "no store"])
def test_a_bad_topology_or_a_missing_store_is_refused_before_torch_loads(
        stores: dict[str, Path], tmp_path: Path, case: str) -> None:
    topology = tmp_path / "topology.json"
    topology.write_text('{"gpus": 8}\n')
    store = stores["good"] if case == "bad topology" else tmp_path / "missing"
    result = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, str(store), "--out",
                             str(tmp_path / "r"), "--topology", str(topology)],
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["2", "False"], result.stderr
    assert str(topology if case == "bad topology" else store) in _one_line(result)
