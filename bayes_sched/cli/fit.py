"""``bayes-sched fit throughput|efficiency``: fit one model and print its parameters."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from bayes_sched.cli._common import stderr
from bayes_sched.cli.options import finite_float, int_in_range, positive_int, seed
from bayes_sched.tables import print_json, print_table
from perfmodel.datasets import POLLUX_MODELS, pollux_model_dir
from perfmodel.errors import InputError

# The models (numpy, pandas, torch, pyro) are imported by the functions that fit them, so
# ``--help`` stays instant.
if TYPE_CHECKING:
    from perfmodel.profiles import StepTimeProfile
    from perfmodel.throughput_bayes.prior import StepTimePrior


def population_prior(profile: StepTimeProfile) -> StepTimePrior:
    """A prior learned from the shipped models' point fits, leaving out one of the same name."""
    from perfmodel.profiles import read_step_time_profile
    from perfmodel.throughput import fit_throughput
    from perfmodel.throughput_bayes.prior import StepTimePrior

    reference = [read_step_time_profile(pollux_model_dir(m), m) for m in POLLUX_MODELS
                 if m != profile.model]
    return StepTimePrior.from_population(profile, [(r, fit_throughput(r)) for r in reference])


def gradient_bytes_of(model: str, parameters: int | None, grad_bytes: float | None) -> float:
    """Bytes of one gradient all-reduce of ``model``: ``grad_bytes`` where given, else
    ``parameters`` fp32 gradients, else a shipped model's published parameter count
    (:data:`perfmodel.datasets.POLLUX_PARAMETERS`); an :class:`InputError` naming the flags
    where none applies."""
    from perfmodel.allreduce import gradient_bytes
    from perfmodel.datasets import POLLUX_PARAMETERS

    if grad_bytes is not None:
        return grad_bytes
    if parameters is not None:
        return gradient_bytes(parameters)
    if model in POLLUX_PARAMETERS:
        return gradient_bytes(POLLUX_PARAMETERS[model])
    raise InputError(f"--physics-prior: the gradient bytes of '{model}' are unknown; expected "
                     "--parameters N or --gradient-bytes B")


def _prior(profile: StepTimeProfile, args: argparse.Namespace, gpu_type: str | None
           ) -> StepTimePrior | None:
    """The prior ``args`` ask for: the default (``None``), the population's, and/or the network
    terms' from physics on ``gpu_type``'s links in ``--cluster`` (an untyped profile: the
    cluster's one type)."""
    base = population_prior(profile) if args.population_prior else None
    if not args.physics_prior:
        return base
    from bayes_sched.cluster_spec import load_cluster_spec
    from perfmodel.sync_prior import physics_prior

    spec = load_cluster_spec(args.cluster)
    if gpu_type is None:
        if len(spec.types) != 1:
            raise InputError(f"--physics-prior: an untyped profile on --cluster {args.cluster} "
                             f"of {len(spec.types)} GPU types; expected one type, or a folder "
                             "of per-type profiles")
        gpu_type = spec.types[0]
    try:
        links = spec.links_of(gpu_type)
    except InputError as error:
        raise InputError(f"--physics-prior on {gpu_type}: --cluster {args.cluster}: "
                         f"{str(error).split(': ', 1)[-1]}") from None
    grad_bytes = gradient_bytes_of(profile.model, args.parameters, args.gradient_bytes)
    return physics_prior(profile, grad_bytes, links, base=base)


#: The posterior intervals ``fit throughput`` prints (central, of the draws).
INTERVAL_LEVEL = 0.9

#: The top-level keys of ``fit throughput --json``, the same for every method (null where a
#: method has none: a point fit has no interval, seed or diagnostics; a posterior no objective).
FIT_JSON_KEYS = ("model", "method", "requested_method", "rows", "interval_level", "seed",
                 "objective", "diagnostics", "parameters")


def _fit_document(model: str, method: str, requested_method: str, rows: int, *,
                  parameters: list[dict[str, Any]], interval_level: float | None = None,
                  seed: int | None = None, objective: float | None = None,
                  diagnostics: dict[str, Any] | None = None) -> dict[str, Any]:
    """``fit throughput --json``'s document: :data:`FIT_JSON_KEYS` in that order."""
    document = {"model": model, "method": method, "requested_method": requested_method,
                "rows": rows, "interval_level": interval_level, "seed": seed,
                "objective": objective, "diagnostics": diagnostics, "parameters": parameters}
    return document


def _fit_throughput(args: argparse.Namespace) -> int:
    from perfmodel.profiles import resolve_profile
    from perfmodel.typed_profiles import holds_typed_profiles, read_typed_source

    if not holds_typed_profiles(args.profile):
        if args.gpu_type is not None:
            raise InputError(f"--gpu-type {args.gpu_type}: expected a folder of per-type "
                             "profiles (placements-<type>.csv or <type>/<model>/)", args.profile)
        document = _fit_one(resolve_profile(args.profile), args, None)
        if args.json:
            print_json(document)
        return 0
    by_model = read_typed_source(args.profile)
    pairs = [(model, gpu, profile) for model, by_type in sorted(by_model.items())
             for gpu, profile in sorted(by_type.items(), key=lambda kv: str(kv[0]))
             if args.gpu_type is None or gpu == args.gpu_type]
    if not pairs:
        raise InputError(f"--gpu-type {args.gpu_type}: no profile of that type; expected one of "
                         f"{', '.join(sorted({str(g) for t in by_model.values() for g in t}))}",
                         args.profile)
    documents = [{**_fit_one(profile, args, gpu), "gpu_type": gpu} for _, gpu, profile in pairs]
    if args.json:  # one document per (model, type): FIT_JSON_KEYS and gpu_type
        print_json(documents)
    return 0


def _fit_one(profile: StepTimeProfile, args: argparse.Namespace, gpu_type: str | None
             ) -> dict[str, Any]:
    """Fit one profile as ``args`` say; print its table unless ``--json``; return its JSON
    document (:data:`FIT_JSON_KEYS`). ``gpu_type`` names the type it was measured on, where
    known (in the title)."""
    from perfmodel.throughput import PARAM_UNITS, fit_objective, fit_throughput

    on = "" if gpu_type is None else f" on {gpu_type}"
    if args.method == "point":
        params = fit_throughput(profile)
        rows = [{"parameter": k, "unit": PARAM_UNITS[k], "point_fit": v}
                for k, v in params.as_dict().items()]
        if not args.json:
            print_table(rows, title=f"{profile.model}{on}: point fit")
        # no interval, no seed, no diagnostics: null (FIT_JSON_KEYS)
        return _fit_document(profile.model, "point", "point", len(profile),
                             objective=fit_objective(params.as_array(), profile),
                             parameters=rows)
    from perfmodel.throughput_bayes.fit import fit_throughput_posterior  # torch, pyro: seconds

    prior = _prior(profile, args, gpu_type)
    with stderr.status(f"fitting {profile.model}{on} by {args.method} ..."):
        posterior = fit_throughput_posterior(profile, method=args.method, seed=args.seed,
                                             prior=prior,
                                             placement_effects=args.placement_effects,
                                             fallback=not args.no_fallback)
    diagnostics = posterior.diagnostics
    if diagnostics.fallback_from is not None:
        print(f"bayes-sched: note: {profile.model}{on}: posterior by {diagnostics.source}",
              file=sys.stderr)
    # An unreliable fit's warning comes from the library (UnreliableFitWarning), one line.
    if not args.json:
        print_table(posterior.parameter_summary(INTERVAL_LEVEL),
                    title=f"{profile.model}{on}: posterior ({diagnostics.source}, "
                          f"{INTERVAL_LEVEL:.0%} intervals, PSIS k-hat {diagnostics.pareto_k:.2f})")
    # the rows, the interval level and the fit's diagnostics (NaN -> null)
    return _fit_document(profile.model, diagnostics.method, args.method, len(profile),
                         interval_level=INTERVAL_LEVEL, seed=args.seed,
                         diagnostics=diagnostics.as_dict(),
                         parameters=posterior.parameter_summary(INTERVAL_LEVEL))


def _fit_efficiency(args: argparse.Namespace) -> int:
    import numpy as np

    from perfmodel.efficiency import EfficiencyModel
    from perfmodel.profiles import resolve_gradients
    from perfmodel.report import efficiency_table

    traces = resolve_gradients(args.gradients)
    if args.init_bsz is not None and not 1 <= args.init_bsz <= min(traces):
        raise InputError(f"--init-bsz {args.init_bsz}: expected an integer in [1, {min(traces)}] "
                         "(the smallest traced batch size)")
    model = EfficiencyModel.fit(traces, init_bsz=args.init_bsz)
    batch_sizes = args.batch_size or sorted(model.curves)
    if np.any(np.asarray(batch_sizes) < model.init_bsz):
        raise InputError(f"--batch-size: expected batch sizes of at least the initial batch "
                         f"size {model.init_bsz}")
    print_table(efficiency_table(model, batch_sizes), as_json=args.json,
                title=f"statistical efficiency (initial batch {model.init_bsz}, 90% intervals)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    fit = subparsers.add_parser("fit", help="fit a throughput or efficiency model")
    kinds = fit.add_subparsers(dest="kind", metavar="KIND", required=True)

    tp = kinds.add_parser("throughput", help="fit the step-time (throughput) model",
                          description="Fit Pollux's step-time model to a profile: a CSV in the "
                          "Pollux placements/scalability format or the project's own format, a "
                          "folder of them, or a shipped model's name. A folder of per-GPU-type "
                          "profiles (TYPE/MODEL/ folders, or MODEL/ folders of "
                          "placements-TYPE.csv) is fitted per model and type.")
    tp.add_argument("profile", help="profile CSV, folder, or shipped model name")
    tp.add_argument("--gpu-type", metavar="TYPE",
                    help="with a folder of per-type profiles: fit that type's only")
    tp.add_argument("--method", choices=("svi", "nuts", "point"), default="svi")
    tp.add_argument("--population-prior", action="store_true",
                    help="learn the prior from the shipped models' fits (for profiles with few "
                    "placements, e.g. a new job measured on one GPU)")
    tp.add_argument("--physics-prior", action="store_true",
                    help="the network terms' prior from a ring all-reduce of the model's "
                    "gradient bytes over its GPU type's links in --cluster (for a type "
                    "measured on few placements)")
    tp.add_argument("--cluster", default="16x4:t4", metavar="SPEC",
                    help="with --physics-prior: the cluster (short string or file, its declared "
                    "GPU types too) whose nodes of each type give the links (default 16x4:t4)")
    size = tp.add_mutually_exclusive_group()
    size.add_argument("--parameters", type=int_in_range(1, 10**13), metavar="N",
                      help="with --physics-prior: trainable parameters (fp32 gradients; default "
                      "a shipped model's published count)")
    size.add_argument("--gradient-bytes", type=finite_float(0.0, 1e15, min_open=True,
                                                            unit="bytes"), metavar="B",
                      help="with --physics-prior: bytes of one gradient all-reduce")
    tp.add_argument("--placement-effects", action="store_true",
                    help="model a deviation shared by the rows of each placement")
    tp.add_argument("--no-fallback", action="store_true",
                    help="keep SVI's draws even when PSIS k-hat is above 0.7 (by default NUTS "
                    "replaces them)")
    tp.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    tp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    tp.set_defaults(handler=_fit_throughput)

    eff = kinds.add_parser("efficiency", help="fit statistical efficiency from gradient stats",
                           description="Fit the gradient noise scale along training from "
                           "validation-<B>.csv files (a file, a folder or a shipped model's name) "
                           "and print efficiency with 90% intervals.")
    eff.add_argument("gradients", help="validation CSV, folder, or shipped model name")
    eff.add_argument("--init-bsz", type=positive_int, default=None,
                     help="initial batch size (default: smallest traced batch size)")
    eff.add_argument("--batch-size", type=positive_int, nargs="*", default=None,
                     help="batch sizes to tabulate (default: the traced ones)")
    eff.add_argument("--json", action="store_true", help="print JSON instead of a table")
    eff.set_defaults(handler=_fit_efficiency)
