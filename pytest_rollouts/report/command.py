"""``pytest-rollouts report RUN [--baseline OLD] -o FILE``: a finished run's report, from its files.

``cli.py`` adds this command to its parser. Exit codes follow the README's table: 0 the report is
written, 4 a usage error (a bad option, a run or baseline that is not there, a line that is not
JSON), 1 when the report cannot be written. The run's own gates are not recorded in its files:
``--fail-under`` and ``--require-complete`` judge it as the run would have with them.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from pytest_rollouts.options import OPTION
from pytest_rollouts.report.build import write_report
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
        "--fail-under", type=float, default=None, metavar=OPTION["fail_under"].metavar, help=OPTION["fail_under"].help
    )
    report.add_argument("--require-complete", action="store_true", help=OPTION["require_complete"].help)
    report.add_argument("--title", metavar="TEXT", help="the page's title (default: Rollouts report: <RUN's name>)")


def report_command(args: argparse.Namespace) -> int:
    run = Path(args.run)
    problems = [
        f"{given}: {path} is not there; name a run's <stem>.jsonl"
        for given, out in (("RUN", run), ("--baseline", Path(args.baseline) if args.baseline else None))
        if out is not None
        for path in (out, ArtifactPaths(out).materialized)
        if not path.is_file()
    ]
    if args.fail_under is not None and not math.isfinite(args.fail_under):
        problems.append(f"--fail-under: must be a finite number, got {args.fail_under:g}")
    target = Path(args.out) if args.out else run.with_name(run.stem + "_report.html")
    if target.is_dir():
        problems.append(f"-o: {target} is a directory; name the HTML file in it")
    if problems:
        return _usage(problems[0])
    gate = Gate(args.require_complete, args.fail_under, out=str(run), fail_under_option="--fail-under")
    try:
        write_report(target, run, baseline=Path(args.baseline) if args.baseline else None, gate=gate, title=args.title)
    except (JsonlError, FileNotFoundError) as exc:
        return _usage(str(exc))
    except ArtifactError as exc:
        print(f"pytest-rollouts report: {exc}", file=sys.stderr)
        return EXIT_UNWRITABLE
    print(f"report: {target}")
    return 0


def _usage(message: str) -> int:
    print(f"pytest-rollouts report: {message}", file=sys.stderr)
    return EXIT_USAGE
