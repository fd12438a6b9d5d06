"""``bayes-sched report``: fit models and write the Markdown report with plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from bayes_sched.cli._common import print_table, stderr, track
from bayes_sched.cli.fit import resolve_gradients, resolve_profile
from perfmodel.datasets import POLLUX_MODELS
from perfmodel.errors import InputError

if TYPE_CHECKING:  # the report code (matplotlib, torch) is imported when a report is written
    from perfmodel.report import ModelFit


def prepare_out_dir(out: str) -> Path:
    """Create the report folder, or say in one line why it cannot be written."""
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot create report folder: {error.strerror or error}", out) from None
    if not path.is_dir():
        raise InputError("not a folder: expected a folder for the report", out)
    return path


def write_fit_reports(sources: list[str], out: Path, gradients: str | None = None,
                      method: str = "svi", seed: int = 0, as_json: bool = False,
                      show_progress: bool = True) -> list[ModelFit]:
    """Fit each source (profile path or shipped model), write its page and an index."""
    from perfmodel.report import fit_model, write_index, write_model_report

    fits, pages = [], []
    for source in track(sources, "fitting models", total=len(sources), enabled=show_progress):
        profile = resolve_profile(source)
        grad_source = gradients or (source if source in POLLUX_MODELS else None)
        traces = resolve_gradients(grad_source) if grad_source else None
        fit = fit_model(profile, traces, method=method, seed=seed)
        fits.append(fit)
        pages.append(write_model_report(fit, out))
    index = write_index(fits, pages, out)
    print_table([fit.error_summary() for fit in fits], as_json=as_json,
                title="step-time fit (in-sample)")
    if not as_json:
        stderr.print(f"report written to {index}")
    return fits


def _report(args: argparse.Namespace) -> int:
    out = prepare_out_dir(args.out)
    sources = args.profiles or list(POLLUX_MODELS)
    if args.gradients and len(sources) != 1:
        raise InputError("--gradients goes with exactly one profile")
    write_fit_reports(sources, out, args.gradients, args.method, args.seed, args.json)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="fit models and write a Markdown report with plots",
        description="Fit the throughput posterior and efficiency curves of each profile (default: "
        "every shipped model) and write <model>.md pages, PNG plots and index.md.")
    parser.add_argument("profiles", nargs="*", help="profile CSVs/folders or shipped model names")
    parser.add_argument("--gradients", help="validation CSV or folder, for a single profile")
    parser.add_argument("--out", default="report", help="report folder (default: report)")
    parser.add_argument("--method", choices=("svi", "nuts"), default="svi")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=_report)
