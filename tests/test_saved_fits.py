"""Saved fits (issue 17 item 6): a fit is saved as InferenceData on netCDF under a key of its data,
settings and package version, reused while the key matches, refitted when anything changed, and
a saved file that cannot be read is noted in one line and replaced, never a traceback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfmodel import saved_fits
from perfmodel.saved_fits import FitCache, fit_key
from perfmodel.throughput_bayes import fit as fit_module
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.posterior import ThroughputPosterior
from tests.cli_inprocess import run_cli
from tests.conftest import ALL_PLACEMENTS, TRUE_PARAMS, synthetic_profile
from tests.test_interference import synthetic_pairs

#: A quick fit: few steps, few draws, no k-hat (so no fallback either).
QUICK = {"num_steps": 30, "num_samples": 60, "check": False}


def _cache(folder: Path, notes: list[str] | None = None) -> FitCache:
    return FitCache(folder, note=(notes.append if notes is not None else saved_fits.print_note))


def _saved(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.nc"))


def test_a_saved_fit_is_read_back_instead_of_refitted(tmp_path: Path) -> None:
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:4], noise=0.05, seed=3)
    cache = _cache(tmp_path)
    first = fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    [path] = _saved(tmp_path)
    assert path.name.startswith("throughput-synthetic-")
    # Mark the saved draws, keeping the key: a reuse returns the marked draws, a refit would not.
    idata = cache.load("throughput", "synthetic", str(first_key := _key_of(path)))
    assert idata is not None
    idata["posterior"]["alpha_c"] = idata["posterior"]["alpha_c"] * 3.0
    cache.save("throughput", "synthetic", first_key, idata)
    again = fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    np.testing.assert_allclose(again.samples["alpha_c"], 3.0 * first.samples["alpha_c"])
    np.testing.assert_array_equal(again.samples["beta_c"], first.samples["beta_c"])
    assert repr(again.diagnostics) == repr(first.diagnostics)  # NaN fields compare unequal
    assert again.point == first.point
    # Predictions of the reloaded posterior use the same profile-derived state.
    unmarked = ThroughputPosterior.from_inference_data(first.to_inference_data(), profile)
    np.testing.assert_array_equal(
        unmarked.predict_step_time([2], [8], [32])["q0.95"],
        first.predict_step_time([2], [8], [32])["q0.95"])
    # --refit: the saved fit is not read, and the new fit replaces it.
    refitted = fit_throughput_posterior(profile, seed=1, cache=replace(cache, refit=True), **QUICK)
    np.testing.assert_array_equal(refitted.samples["alpha_c"], first.samples["alpha_c"])
    assert _saved(tmp_path) == [path]
    reread = fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    np.testing.assert_array_equal(reread.samples["alpha_c"], first.samples["alpha_c"])


def _key_of(path: Path) -> str:
    with saved_fits.quiet_arviz() as az:
        return str(az.from_netcdf(path).attrs[saved_fits.KEY_ATTR])


def test_new_data_other_settings_or_another_version_refit(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:4], noise=0.05, seed=3)
    cache = _cache(tmp_path)
    fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    changed = replace(profile, step_time=profile.step_time * 1.01)
    fit_throughput_posterior(changed, seed=1, cache=cache, **QUICK)
    fit_throughput_posterior(profile, seed=2, cache=cache, **QUICK)
    assert len(_saved(tmp_path)) == 3  # one per distinct (data, settings)
    data = {"x": np.arange(4.0), "label": np.array(["a", "b"], dtype=object)}
    key = fit_key("k", data, {"seed": 1})
    assert key == fit_key("k", {"label": data["label"].copy(), "x": np.arange(4.0)}, {"seed": 1})
    assert key != fit_key("k", {**data, "x": np.arange(4.0) + 1e-9}, {"seed": 1})
    assert key != fit_key("k", data, {"seed": 2})
    monkeypatch.setattr(saved_fits, "package_version", lambda: "99.0")
    assert key != fit_key("k", data, {"seed": 1})


def _mark(cache: FitCache, path: Path) -> None:
    """Triple the saved draws of ``alpha_c``, keeping the key: a read returns them, a refit not."""
    key = _key_of(path)
    idata = cache.load("throughput", "synthetic", key)
    assert idata is not None
    idata["posterior"]["alpha_c"] = idata["posterior"]["alpha_c"] * 3.0
    cache.save("throughput", "synthetic", key, idata)


def test_a_fit_the_fallback_did_not_replace_is_saved_once(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 35: the key held the fallback setting, so one model had two saved fits of one draws.
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:4], noise=0.05, seed=3)
    cache = _cache(tmp_path)
    checked = {**QUICK, "check": True, "fallback_warmup": 20, "fallback_samples": 20}
    monkeypatch.setattr(fit_module, "PARETO_K_USABLE", 2.0)  # no guide needs the fallback
    alone = fit_throughput_posterior(profile, seed=1, fallback=False, cache=cache, **checked)
    [path] = _saved(tmp_path)
    _mark(cache, path)
    allowed = fit_throughput_posterior(profile, seed=1, fallback=True, cache=cache, **checked)
    assert allowed.diagnostics.fallback_from is None and _saved(tmp_path) == [path]
    np.testing.assert_allclose(allowed.samples["alpha_c"], 3.0 * alone.samples["alpha_c"])
    # Where the guide's k-hat calls the fallback, the saved SVI fit is not its answer: NUTS runs,
    # its fit is saved beside the SVI one, and each setting reads back its own.
    monkeypatch.setattr(fit_module, "PARETO_K_USABLE", -1.0)
    replaced = fit_throughput_posterior(profile, seed=1, fallback=True, cache=cache, **checked)
    assert replaced.diagnostics.fallback_from == "svi"
    [nuts_path] = [p for p in _saved(tmp_path) if p != path]
    _mark(cache, nuts_path)
    again = fit_throughput_posterior(profile, seed=1, fallback=True, cache=cache, **checked)
    np.testing.assert_allclose(again.samples["alpha_c"], 3.0 * replaced.samples["alpha_c"])
    svi = fit_throughput_posterior(profile, seed=1, fallback=False, cache=cache, **checked)
    assert svi.diagnostics.fallback_from is None
    np.testing.assert_allclose(svi.samples["alpha_c"], 3.0 * alone.samples["alpha_c"])
    assert len(_saved(tmp_path)) == 2


def test_an_unreadable_saved_fit_is_noted_and_replaced(tmp_path: Path) -> None:
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:4], noise=0.05, seed=3)
    notes: list[str] = []
    cache = _cache(tmp_path, notes)
    first = fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    [path] = _saved(tmp_path)
    path.write_bytes(path.read_bytes()[:2000])  # a copy cut short
    again = fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    np.testing.assert_array_equal(again.samples["alpha_c"], first.samples["alpha_c"])
    assert len(notes) == 1 and "\n" not in notes[0]
    assert notes.pop().startswith(f"saved fit {path} could not be read (")
    key = _key_of(path)  # readable again: the refit replaced it
    # A file holding another key under this name (a copy, a collision) is not trusted either.
    other = cache.save("throughput", "synthetic", "f" * 64, first.to_inference_data())
    assert other is not None
    path.write_bytes(other.read_bytes())
    fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    assert len(notes) == 1 and f"expected {key[:16]}" in notes.pop()
    assert _key_of(path) == key
    # The right key but content this code cannot use (saved by other code of the same version).
    idata = cache.load("throughput", "synthetic", key)
    assert idata is not None
    del idata.attrs["diagnostics"]
    cache.save("throughput", "synthetic", key, idata)
    again = fit_throughput_posterior(profile, seed=1, cache=cache, **QUICK)
    np.testing.assert_array_equal(again.samples["alpha_c"], first.samples["alpha_c"])
    assert len(notes) == 1 and "could not be read ('diagnostics')" in notes[0]


def test_writes_are_atomic_and_an_unwritable_folder_only_notes(tmp_path: Path) -> None:
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:4], noise=0.05, seed=3)
    notes: list[str] = []
    posterior = fit_throughput_posterior(profile, seed=1, **QUICK)
    cache = _cache(tmp_path / "fits", notes)
    key = "0" * 64
    # A writer killed mid-write leaves only its temporary file: never read, never a fit.
    (tmp_path / "fits").mkdir()
    (tmp_path / "fits" / f".{cache.path('throughput', 'synthetic', key).name}.x.tmp").write_bytes(
        b"partial")
    assert cache.load("throughput", "synthetic", key) is None and notes == []
    path = cache.save("throughput", "synthetic", key, posterior.to_inference_data())
    assert path is not None and cache.load("throughput", "synthetic", key) is not None
    assert [p.name for p in (tmp_path / "fits").iterdir() if p.suffix == ".tmp"] == [
        f".{path.name}.x.tmp"]  # the save left no temporary file of its own
    blocked = _cache(tmp_path / "a-file" / "fits", notes)
    (tmp_path / "a-file").write_text("not a folder")
    assert blocked.save("throughput", "synthetic", key, posterior.to_inference_data()) is None
    assert len(notes) == 1 and notes[0].startswith("could not save the fit to ")


def test_interference_command_reuses_its_saved_fit(tmp_path: Path) -> None:
    pairs, features, _ = synthetic_pairs(6, seed=2)
    pairs.to_csv(tmp_path / "pairs.csv", index=False)
    features.to_csv(tmp_path / "solo.csv")
    cache = tmp_path / "cache"
    command = ["infer", "interference", str(tmp_path / "pairs.csv"), str(tmp_path / "solo.csv"),
               "--jobs", "job0,job1,job4", "--steps", "300", "--seed", "0", "--json",
               "--cache-dir", str(cache)]

    def run(*extra: str) -> tuple[list[dict], str]:
        done = run_cli(*command, *extra)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), done.stderr

    fitted, _ = run()
    [path] = _saved(cache)
    assert path.name.startswith("interference-model-")
    stamp = path.stat().st_mtime_ns
    reused, _ = run()
    assert reused == fitted and path.stat().st_mtime_ns == stamp  # read, not rewritten
    path.write_bytes(path.read_bytes()[:300])
    refitted, stderr = run()
    assert refitted == fitted
    assert stderr.startswith(f"bayes-sched: note: saved fit {path} could not be read (")
    assert stderr.count("\n") == 1
    (tmp_path / "blocker").write_text("")
    refused = run_cli(*command[:-1], str(tmp_path / "blocker"))
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("is a file; expected a folder to keep saved fits in")
