"""``bayes-sched report``: fit models and write the Markdown report with plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from bayes_sched.cli._common import fit_cache, stderr, track
from bayes_sched.cli.options import (
    OUT_DIR_RULE,
    add_cache_options,
    check_cache_dir,
    check_out_dir,
    seed,
)
from bayes_sched.tables import print_table
from perfmodel.datasets import POLLUX_MODELS
from perfmodel.errors import InputError

if TYPE_CHECKING:  # the report code (matplotlib, torch) is imported when a report is written
    from perfmodel.profiles import GradientTrace, StepTimeProfile
    from perfmodel.report import ModelFit
    from perfmodel.saved_fits import FitCache

#: A profile to fit and its gradient traces (``None``: no efficiency curves).
FitSource = tuple["StepTimeProfile", "dict[int, GradientTrace] | None"]


def prepare_out_dir(out: str | Path, flag: str = "--out") -> Path:
    """Create the report folder (checked by :func:`check_out_dir`), or say in one line why not."""
    path = check_out_dir(out, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{flag}: cannot create report folder: {error.strerror or error}",
                         str(out)) from None
    return path


def resolve_sources(sources: list[str], gradients: str | None = None) -> list[FitSource]:
    """Read every profile (and its gradient traces) before any fit, so bad input fails fast. A
    folder of per-GPU-type profiles gives one source per model and type, named
    ``<model>-<type>`` (with the shipped model's gradient traces where it is one)."""
    from dataclasses import replace

    from perfmodel.profiles import resolve_gradients, resolve_profile
    from perfmodel.typed_profiles import holds_typed_profiles, read_typed_source

    resolved: list[FitSource] = []
    for source in sources:
        if holds_typed_profiles(source):
            for model, by_type in sorted(read_typed_source(source).items()):
                grad_source = gradients or (model if model in POLLUX_MODELS else None)
                traces = resolve_gradients(grad_source) if grad_source else None
                for gpu, typed in sorted(by_type.items(), key=lambda kv: str(kv[0])):
                    name = model if gpu is None else f"{model}-{gpu}"
                    resolved.append((replace(typed, model=name), traces))
            continue
        profile = resolve_profile(source)
        grad_source = gradients or (source if source in POLLUX_MODELS else None)
        resolved.append((profile, resolve_gradients(grad_source) if grad_source else None))
    return resolved


def write_fit_reports(sources: list[FitSource], out: Path, method: str = "svi", seed: int = 0,
                      as_json: bool = False, show_progress: bool = True,
                      cache: FitCache | None = None, fallback: bool = True) -> list[ModelFit]:
    """Fit each resolved source (or reuse its saved fit from ``cache``), write its page and an
    index."""
    from perfmodel.report import fit_model, write_index, write_model_report

    fits, pages = [], []
    for profile, traces in track(sources, "fitting models", total=len(sources),
                                 enabled=show_progress):
        fit = fit_model(profile, traces, method=method, seed=seed, cache=cache,
                        fallback=fallback)
        fits.append(fit)
        pages.append(write_model_report(fit, out))
    index = write_index(fits, pages, out)
    print_table([fit.error_summary() for fit in fits], as_json=as_json,
                title="step-time fit (in-sample)")
    if not as_json:
        stderr.print(f"report written to {index}")
    return fits


def _report(args: argparse.Namespace) -> int:
    check_out_dir(args.out)
    check_cache_dir(args)
    sources = args.profiles or list(POLLUX_MODELS)
    if args.gradients and len(sources) != 1:
        raise InputError("--gradients goes with exactly one profile")
    resolved = resolve_sources(sources, args.gradients)
    out = prepare_out_dir(args.out)
    write_fit_reports(resolved, out, args.method, args.seed, args.json, cache=fit_cache(args),
                      fallback=not args.no_fallback)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="fit models and write a Markdown report with plots",
        description="Fit the throughput posterior and efficiency curves of each profile (default: "
        "every shipped model) and write <model>.md pages, PNG plots and index.md. A saved fit of "
        "the same data, settings and version is reused (--refit to fit again).")
    parser.add_argument("profiles", nargs="*",
                        help="profile CSVs/folders or shipped model names; a folder of "
                             "per-GPU-type profiles is fitted per model and type")
    parser.add_argument("--gradients", help="validation CSV or folder, for a single profile")
    parser.add_argument("--out", default="report",
                        help=f"report folder (default: report); {OUT_DIR_RULE}")
    parser.add_argument("--method", choices=("svi", "nuts"), default="svi")
    parser.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    parser.add_argument("--no-fallback", action="store_true",
                        help="keep SVI's draws even when PSIS k-hat is above 0.7 (by default NUTS "
                        "replaces them; minutes per model)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_cache_options(parser)
    parser.set_defaults(handler=_report)
