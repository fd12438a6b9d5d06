"""The physics prior of sync time in the per-type fits: ``fit throughput DIR --gpu-type T
--physics-prior`` and the typed world's ``job_posterior`` estimator put the network terms at a
ring all-reduce of the model's gradient bytes over type T's links (built-in or declared in the
cluster file), so a type measured on one GPU only gets its sync time from its links.

The 1-GPU profile of a declared type is synthesised here from the shipped ncf T4 profile
(:mod:`bayes_sched.sim.synthetic_profiles`); no other project's profiles are used."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.cluster_spec import load_cluster_spec, parse_cluster_spec
from bayes_sched.estimation.job_models import sync_prior_of
from bayes_sched.jobs import BatchLimits, JobSettings, JobView
from bayes_sched.sim.physics import reported_gradient_bytes
from bayes_sched.sim.synthetic_profiles import synthesise_type_profiles
from perfmodel.allreduce import gradient_bytes, line_rate_terms
from perfmodel.datasets import POLLUX_PARAMETERS
from perfmodel.sync_prior import LinkSlowdown
from perfmodel.typed_profiles import read_typed_profiles
from tests.cli_inprocess import run_cli


def _cluster(folder: Path, link: float) -> Path:
    path = folder / f"cluster-{link:g}.toml"
    path.write_text(f'[[gpu_types]]\nname = "mi250x"\nmemory_gib = 128\npeak_tflops = 47.9\n'
                    f'link_gbytes_per_s = {link}\n[[nodes]]\ngpu_type = "mi250x"\ngpus = 4\n'
                    '[[nodes]]\ngpu_type = "v100"\ngpus = 4\n')
    return path


@pytest.fixture(scope="module")
def one_gpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ncf measured on the declared type on one GPU only (its 1-GPU rows)."""
    root = tmp_path_factory.mktemp("one-gpu")
    full = root / "full"
    catalog = load_cluster_spec(_cluster(root, 31.5)).catalog
    synthesise_type_profiles(full, ["mi250x"], ["ncf"], seed=4, catalog=catalog)
    few = root / "few" / "mi250x" / "ncf"
    few.mkdir(parents=True)
    lines = (full / "mi250x" / "ncf" / "placements.csv").read_text().splitlines()
    keep = [lines[0]] + [line for line in lines[1:] if line.split(",")[0] == "1"]
    (few / "placements.csv").write_text("\n".join(keep) + "\n")
    assert (read_typed_profiles(root / "few")["ncf"]["mi250x"].num_replicas == 1).all()
    return root


def _alpha_r(document: dict) -> dict:
    (row,) = [r for r in document["parameters"] if r["parameter"] == "alpha_r"]
    return row


def test_fit_per_type_takes_the_sync_prior_from_the_declared_links(one_gpu: Path) -> None:
    fits = {}
    for link in (31.5, 315.0):
        done = run_cli("fit", "throughput", str(one_gpu / "few"), "--gpu-type", "mi250x",
                       "--physics-prior", "--cluster", str(_cluster(one_gpu, link)), "--json")
        assert done.returncode == 0, done.stderr
        (document,) = json.loads(done.stdout)
        fits[link] = _alpha_r(document)
    # One GPU says nothing of alpha_r: its posterior is the prior, a ring of ncf's fp32
    # gradients over the declared link, the default slowdown's median above line rate.
    bytes_ = gradient_bytes(POLLUX_PARAMETERS["ncf"])
    slowdown = math.exp(LinkSlowdown.default().loc["alpha_r"])
    for link, row in fits.items():
        expected = bytes_ / (link * 1e9) * slowdown
        assert row["lower_90"] < expected < row["upper_90"]
        assert row["upper_90"] / row["lower_90"] < 40
    # Ten times the link, a tenth of the sync constant (within the draws' noise).
    ratio = fits[31.5]["mean"] / fits[315.0]["mean"]
    assert 5 < ratio < 20


def test_physics_prior_flags_refuse_what_they_cannot_use(one_gpu: Path, tmp_path: Path) -> None:
    cluster = _cluster(one_gpu, 31.5)
    elsewhere = run_cli("fit", "throughput", str(one_gpu / "few"), "--gpu-type", "mi250x",
                        "--physics-prior", "--cluster", "v100:8")
    assert elsewhere.returncode == 2 and "no node of GPU type 'mi250x'" in elsewhere.stderr
    mine = tmp_path / "mine" / "mi250x" / "mymodel"
    mine.mkdir(parents=True)
    (mine / "placements.csv").write_text(
        (one_gpu / "few" / "mi250x" / "ncf" / "placements.csv").read_text())
    unknown = run_cli("fit", "throughput", str(tmp_path / "mine"), "--physics-prior",
                      "--cluster", str(cluster))
    assert unknown.returncode == 2 and "--parameters N or --gradient-bytes B" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1


def test_the_estimator_builds_the_prior_from_reported_bytes_and_the_type(one_gpu: Path) -> None:
    spec = load_cluster_spec(_cluster(one_gpu, 31.5))
    profile = read_typed_profiles(one_gpu / "few")["ncf"]["mi250x"]
    bytes_ = reported_gradient_bytes("ncf")
    assert bytes_ == 4 * POLLUX_PARAMETERS["ncf"]
    view = JobView("ncf-0", "ncf", 0.0, 0.0, 0.0, np.zeros(2, dtype=np.int64), 0, 1, 32768,
                   JobSettings(), BatchLimits(256, 32768, 32, 8192), gradient_bytes=bytes_)
    slowdown = LinkSlowdown.default()
    for gpu_type in ("mi250x", "v100"):
        prior = sync_prior_of(profile, view, gpu_type, spec)
        assert prior is not None
        rate = line_rate_terms(bytes_, spec.links_of(gpu_type))
        for term in ("alpha_r", "alpha_n"):
            assert prior.loc[term] == pytest.approx(math.log(rate[term]) + slowdown.loc[term])
    # Nothing reported, or a type the cluster lacks: the default prior.
    assert sync_prior_of(profile, dataclasses.replace(view, gradient_bytes=None),
                         "mi250x", spec) is None
    assert sync_prior_of(profile, view, "k80", spec) is None
    # A cluster of one type labels measurements with the default type: that type's links.
    one = parse_cluster_spec("4x4:t4")
    prior = sync_prior_of(profile, view, "default", one)
    assert prior is not None and prior.loc["alpha_r"] == pytest.approx(
        math.log(line_rate_terms(bytes_, one.links_of("t4"))["alpha_r"])
        + slowdown.loc["alpha_r"])


def test_a_real_job_reports_its_gradient_bytes_to_its_view(tmp_path: Path) -> None:
    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.backends.local import LocalLauncher
    from bayes_sched.backends.real_cluster import JobRecord, RealCluster

    cluster = RealCluster(LocalLauncher(1), tmp_path / "jobs")
    cluster.submit(RealJobSpec("j", ("true",), 32, 256, 64, 1))
    record = cluster.records["j"]
    assert [view.gradient_bytes for view in cluster.job_views()] == [None]
    # The client's 'start' report (bayes_sched.client.elastic) carries them; a bad value is
    # not taken.
    cluster._take_report(record, "start", {"attempt": 1, "gradient_bytes": 4.4e8})
    cluster._take_report(record, "start", {"attempt": 2, "gradient_bytes": "many"})
    assert [view.gradient_bytes for view in cluster.job_views()] == [4.4e8]
    assert JobRecord.from_dict(record.to_dict()).gradient_bytes == 4.4e8
