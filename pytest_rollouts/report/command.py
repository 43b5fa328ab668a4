"""``pytest-rollouts report RUN [--baseline OLD] -o FILE``: a finished run's report, from its files.

``cli.py`` adds this command to its parser. Exit codes follow the README's table: 0 the report is
written, 4 a usage error (a bad option, a run or baseline that is not there, a line that is not
JSON, a report that would replace one of the runs' own files), 1 when the report cannot be written.
The run's own gates are not recorded in its files: ``--fail-under``, ``--max-failures``,
``--gate-on`` and ``--require-complete`` judge it as the run would have with them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from pytest_rollouts.config.errors import describe_errors
from pytest_rollouts.config.output_values import report_clash
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.options import OPTION
from pytest_rollouts.report.build import write_report
from pytest_rollouts.scoring.comparison_options import comparison_arguments
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import ArtifactError, JsonlError

EXIT_USAGE = 4  # cli.py's: every usage error of every command
EXIT_UNWRITABLE = 1


def add_report_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    report = commands.add_parser(
        "report", help="write a run's self-contained HTML report: coverage, metrics, gates, charts, every rollout"
    )
    report.add_argument("run", metavar="RUN", help="the run's <stem>.jsonl")
    report.add_argument(
        "-o", "--out", metavar="FILE", help="the HTML file to write (default: <stem>_report.html beside RUN)"
    )
    report.add_argument(
        "--baseline",
        metavar="OLD",
        help="an earlier run's <stem>.jsonl: add the paired comparison and the flipped tasks",
    )
    report.add_argument(
        "--fail-under",
        default=None,  # text, checked by the run's own rules (``_gate``): 1e400 said as what it is
        metavar=OPTION["fail_under"].metavar,
        help=OPTION["fail_under"].argparse_help,
    )
    report.add_argument("--require-complete", action="store_true", help=OPTION["require_complete"].argparse_help)
    report.add_argument(
        "--max-failures", metavar=OPTION["max_failures"].metavar, help=OPTION["max_failures"].argparse_help
    )
    report.add_argument("--gate-on", metavar=OPTION["gate_on"].metavar, help=OPTION["gate_on"].argparse_help)
    comparison_arguments(report)
    report.add_argument("--title", metavar="TEXT", help="the page's title (default: Rollouts report: <RUN's name>)")


def report_command(args: argparse.Namespace) -> int:
    run = Path(args.run)
    baseline = Path(args.baseline) if args.baseline else None
    problems = [
        f"{given}: {path} is {'a directory' if path.is_dir() else 'not there'}; name a run's <stem>.jsonl"
        for given, out in (("RUN", run), ("--baseline", baseline))
        if out is not None
        for path in (out, ArtifactPaths(out).materialized)
        if not path.is_file()
    ]
    target = Path(args.out) if args.out else run.with_name(run.stem + "_report.html")
    if target.is_dir():
        problems.append(f"-o: {target} is a directory; name the HTML file in it")
    clash = report_clash(target, {"RUN": run, "the baseline": baseline})
    if clash:
        problems.append(f"-o: {clash}")
    try:
        gate = _gate(args, run)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        return _usage(problems[0])
    try:
        write_report(
            target,
            run,
            baseline=baseline,
            gate=gate,
            title=args.title,
            correction=args.correction,
            sequential_test=args.sequential,
        )
    except (JsonlError, FileNotFoundError) as exc:
        return _usage(str(exc))
    except ArtifactError as exc:
        print(f"pytest-rollouts report: {exc}", file=sys.stderr)
        return EXIT_UNWRITABLE
    print(f"report: {target}")
    return 0


def _gate(args: argparse.Namespace, run: Path) -> Gate:
    """The gates a run's files do not record, judged as the run would have with them, their values
    checked by the run's own rules (``ValueError`` names the flag)."""
    given = {"fail_under": args.fail_under, "max_failures": args.max_failures, "gate_on": args.gate_on}
    flags = {name: "--" + name.replace("_", "-") for name in given}
    try:
        settings = Settings.model_validate(
            {name: value for name, value in given.items() if value is not None}, context={"sources": flags}
        )
    except ValidationError as exc:
        raise ValueError(describe_errors(exc, flags).strip()) from None
    return replace(Gate.of(settings), require_complete=args.require_complete, out=str(run))


def _usage(message: str) -> int:
    print(f"pytest-rollouts report: {message}", file=sys.stderr)
    return EXIT_USAGE
