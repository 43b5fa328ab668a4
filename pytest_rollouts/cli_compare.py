"""``pytest-rollouts compare`` and ``pytest-rollouts power``: two runs side by side, and one run's power.

Kept apart from ``cli.py`` (the merge) so each command's module does one job; ``cli.py`` adds
these commands to its parser and dispatches to them. Exit codes follow the README's table: 0 the
comparison ran (and its gate passed), 4 a usage error, 8 the runs cannot be paired task by task
(as the merge's inputs that do not form one run), 10 the candidate may be worse than
``--max-regression`` allows, 1 when ``--json`` cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from pytest_rollouts.config.fields import need_gate
from pytest_rollouts.config.output_values import run_file_clash
from pytest_rollouts.config.values import finite_number
from pytest_rollouts.options import OPTION
from pytest_rollouts.scoring.compare_runs import compare_runs
from pytest_rollouts.scoring.comparison_lines import power_lines
from pytest_rollouts.scoring.comparison_options import comparison_arguments
from pytest_rollouts.scoring.cost import run_costs
from pytest_rollouts.scoring.intervals import RewardRange
from pytest_rollouts.scoring.pairing import PairingError, read_run
from pytest_rollouts.scoring.power import CORRELATION, variance_components
from pytest_rollouts.scoring.regression import EXIT_REGRESSION, RegressionGate
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import JsonlError, dumps

EXIT_USAGE = 4  # cli.py's: every usage error of every command
EXIT_NOT_PAIRED = 8  # the runs do not form one comparison, as the merge's inputs one run
EXIT_UNWRITABLE = 1


def add_comparison_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``compare`` and ``power`` commands and their options, each with its help."""
    compare = commands.add_parser(
        "compare",
        help="compare a candidate run with a baseline run task by task (paired difference, CI, test, flips)",
    )
    compare.add_argument("baseline", metavar="BASELINE", help="the baseline run's <stem>.jsonl")
    compare.add_argument("candidate", metavar="CANDIDATE", help="the candidate run's <stem>.jsonl")
    compare.add_argument(
        "--allow-partial",
        action="store_true",
        help="compare only the tasks both runs have (and say how many were left out) instead of refusing (exit 8)",
    )
    compare.add_argument(
        "--max-regression",
        type=_finite,
        default=None,
        metavar="DELTA",
        help=f"exit {EXIT_REGRESSION} when the lower end of the 95%% CI of candidate - baseline is below -DELTA "
        "(the candidate may be more than DELTA worse)",
    )
    compare.add_argument(
        "--gate-scored-only",
        action="store_true",
        help=OPTION["gate_scored_only"].argparse_help.replace("--rollouts-", "--"),
    )
    compare.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="BASELINE_AGENT=CANDIDATE_AGENT",
        help="compare a baseline agent with a candidate agent of another name (repeatable); "
        "two runs of one agent each pair without it",
    )
    _reward_range_argument(compare)
    comparison_arguments(compare)
    compare.add_argument("--json", metavar="PATH", help="also write the comparison to PATH as JSON")
    power = commands.add_parser(
        "power", help="the smallest difference a run of this size detects, and the tasks needed to detect --delta"
    )
    power.add_argument("run", metavar="RUN", help="a run's <stem>.jsonl")
    power.add_argument(
        "--delta", type=_finite, default=None, metavar="D", help="also say how many tasks (by repeats) would detect D"
    )
    power.add_argument(
        "--correlation",
        type=_finite,
        default=CORRELATION,
        metavar="R",
        help=f"assumed correlation of two models' true task scores, 0 <= R < 1 (default {CORRELATION:g})",
    )


def _finite(text: str) -> float:
    """A number option's value: finite, or a usage error that says why (``1e400`` is beyond a float)."""
    try:
        return finite_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _reward_range_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reward-range",
        default="0,1",
        metavar=OPTION["reward_range"].metavar,
        help=OPTION["reward_range"].argparse_help.replace("--rollouts-", "--") + " Default: 0,1.",
    )


def compare_command(args: argparse.Namespace) -> int:
    try:
        reward_range = RewardRange.parse(args.reward_range)
        if args.max_regression is not None and args.max_regression < 0:
            raise ValueError(f"--max-regression: must be at least 0, got {args.max_regression:g}")
        need_gate(args.gate_scored_only, args.max_regression, "--gate-scored-only", "--max-regression")
        agents = dict(_agent_pair(value) for value in args.pair)
    except ValueError as exc:
        return _usage("compare", exc)
    gate = None
    if args.max_regression is not None:
        gate = RegressionGate(args.max_regression, scored_only=args.gate_scored_only)
    refused = _json_refused(Path(args.json)) if args.json else None
    if refused:
        return _usage("compare", ValueError(refused))
    for given in (args.baseline, args.candidate):  # a path that is no run is a usage error, not two runs apart
        missing = [p for p in (Path(given), ArtifactPaths(Path(given)).materialized) if not p.is_file()]
        if missing:
            return _usage("compare", ValueError(f"{missing[0]} is not there; name a run's <stem>.jsonl"))
    try:
        result = compare_runs(
            Path(args.baseline),
            Path(args.candidate),
            allow_partial=args.allow_partial,
            reward_range=reward_range,
            gate=gate,
            agents=agents,
            correction=args.correction,
            sequential_test=args.sequential,
        )
    except JsonlError as exc:  # a line that is no JSON object: bad input, named by file and line
        return _usage("compare", exc)
    except PairingError as exc:
        print(f"pytest-rollouts compare: the runs cannot be compared: {exc}", file=sys.stderr)
        return EXIT_NOT_PAIRED
    for line in result.lines():
        print(line)
    if args.json:
        try:
            _write_json(Path(args.json), result.as_dict())
        except OSError as exc:
            print(f"pytest-rollouts compare: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_UNWRITABLE
    if result.failure is not None:
        print(result.failure, file=sys.stderr)
        return EXIT_REGRESSION
    return 0


def _json_refused(path: Path) -> str | None:
    """Why ``--json`` may not be written at ``path``, said before the comparison (as ``report -o``):
    a directory, or a run's file."""
    if path.is_dir():
        return f"--json: {path} is a directory; name the JSON file in it"
    return run_file_clash(path, "the comparison's JSON")


def _write_json(path: Path, comparison: dict[str, object]) -> None:
    """The comparison as strict JSON (the store's encoder: a non-finite number is null), its folder
    made as a report's is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dumps(comparison, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE, strict=True))


def power_command(args: argparse.Namespace) -> int:
    if args.delta is not None and args.delta <= 0:
        return _usage("power", ValueError(f"--delta: must be above 0, got {args.delta:g}"))
    if not 0 <= args.correlation < 1:
        return _usage("power", ValueError(f"--correlation: must be at least 0 and below 1, got {args.correlation:g}"))
    try:
        run = read_run(Path(args.run))
    except (PairingError, JsonlError) as exc:
        return _usage("power", exc)
    sized, costs = 0, run_costs(Path(args.run))
    for group, tasks in sorted(run.groups.items()):
        try:
            variance = variance_components([task.rewards for task in tasks.values()])
        except ValueError as exc:
            print(f"{group}: {exc} (it has {sum(1 for t in tasks.values() if t.rewards)})", file=sys.stderr)
            continue
        try:
            lines = power_lines(group, variance, args.delta, args.correlation, costs.get(group))
        except ValueError as exc:
            return _usage("power", ValueError(f"--delta {args.delta:g}: {group}: {exc}"))
        sized += 1
        for line in lines:
            print(line)
    if not sized:  # advice from nothing would read as advice
        return _usage("power", ValueError(f"{args.run}: no agent has two tasks with a score; nothing to size"))
    return 0


def _agent_pair(value: str) -> tuple[str, str]:
    base, sep, cand = value.partition("=")
    if not sep or not base.strip() or not cand.strip():
        raise ValueError(f"--pair: must be BASELINE_AGENT=CANDIDATE_AGENT, got {value!r}")
    return base.strip(), cand.strip()


def _usage(command: str, exc: Exception) -> int:
    print(f"pytest-rollouts {command}: {exc}", file=sys.stderr)
    return EXIT_USAGE
