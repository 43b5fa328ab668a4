"""``pytest-rollouts aggregate``: merge shards into one run and score it as a single run would.

One unsharded run merges as itself, to be rescored. An earlier output is moved aside as a run
moves its earlier results (``--overwrite`` deletes it). Shards without a manifest (NeMo Gym's)
cannot be proven complete: ``--require-complete`` then fails unless ``--trust-shards``.

The ``compare`` and ``power`` commands are ``cli_compare.py``'s, ``report`` is
``report/command.py``'s and ``status`` is ``cli_status.py``'s; this module adds them to its parser.

Also reachable as ``python -m pytest_rollouts aggregate``. Its options mirror the run's
scoring options, and its exit codes are the run's: 4 for a bad option (checked by the run's
rules, or another session is writing its output or an input), 6 incomplete, 7 below
``--fail-under``, and 8 when the inputs do not form one run (nothing is written on 4 or 8); 1
when an artifact cannot be written (no partial file is left).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pydantic import ValidationError

from pytest_rollouts.cli_compare import add_comparison_commands, compare_command, power_command
from pytest_rollouts.cli_status import add_status_command, status_command
from pytest_rollouts.config.errors import describe_errors
from pytest_rollouts.config.layers import SettingsError, combine_layers
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.datatype import datatype
from pytest_rollouts.lifecycle.refusal import Refusal
from pytest_rollouts.lifecycle.stages import RunLifecycle
from pytest_rollouts.net.address import without_password
from pytest_rollouts.options import OPTION
from pytest_rollouts.plan.files import start_notices
from pytest_rollouts.report.command import add_report_command, report_command
from pytest_rollouts.scoring.gate import EXIT_INCOMPLETE, Gate
from pytest_rollouts.scoring.merge import MergeError, OutputIsInput, check, find_inputs, load_shards, write_merged
from pytest_rollouts.scoring.summary import score_lines
from pytest_rollouts.scoring.verdict import RunEnd
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import ArtifactError, JsonlError
from pytest_rollouts.store.runlock import OutputBusy, RunLock

if TYPE_CHECKING:
    from pytest_rollouts.rows.manifest import RunManifest
    from pytest_rollouts.scoring.aggregate import RunScore
    from pytest_rollouts.store.artifacts import RunStart

EXIT_NOT_ONE_RUN = 8
# The run's statistics options, by settings name: the merged run is scored, compared and gated as
# a run with them would be (their values are checked by the run's rules).
STATISTICS_OPTIONS: dict[str, type] = {
    "reward_range": str,
    "gate_on": str,
    "pass_k": str,
    "group_by": str,
    "baseline": str,
    "max_regression": str,
    "gate_scored_only": bool,
    "correction": str,
    "sequential": bool,
}
UNPROVEN = (
    "the inputs have no run manifest (NeMo Gym shards): their materialized inputs are taken as the whole "
    "run, and that no shard is missing cannot be proven"
)
UNPROVEN_REFUSED = (
    "EVAL FAILED: --require-complete cannot be met: without run manifests, a missing shard would go unseen. "
    "Pass --trust-shards to take these inputs as the whole run."
)
EXIT_USAGE = 4
EXIT_UNWRITABLE = 1  # an artifact could not be written (disk full): nothing partial is left
HEADERS_ENV = str(OPTION["agent_header"].env)


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a bad command line, a code the merge gives no meaning; every other
    usage error of this command exits ``EXIT_USAGE``, and so does this one."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        # argparse quotes what it refused ("unrecognized arguments: --agnt judge=http://u:pw@host").
        shown = re.sub(r"\S+", lambda word: without_password(word[0]), message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {shown}\n")


# Each command's parser, by name, as ``build_parser`` made them last.
COMMANDS: dict[str, argparse.ArgumentParser] = {}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = sys.argv[1:] if argv is None else argv
    _refuse_unknown(args)
    parsed = parser.parse_args(args)
    if parsed.command == "compare":
        return compare_command(parsed)
    if parsed.command == "power":
        return power_command(parsed)
    if parsed.command == "report":
        return report_command(parsed)
    if parsed.command == "status":
        return status_command(parsed)
    return aggregate(parsed)


def _refuse_unknown(args: list[str]) -> None:
    """A mistyped option names the one meant (argparse says only ``unrecognized arguments``, and
    only after a missing required option, which hides the typo). Abbreviations argparse accepts pass."""
    import difflib

    command = COMMANDS.get(next((a for a in args if not a.startswith("-")), ""))
    if command is None:
        return
    known = [flag for action in command._actions for flag in action.option_strings if flag.startswith("--")]
    for arg in args:
        given = arg.split("=", 1)[0]
        if given.startswith("--") and not any(flag.startswith(given) for flag in known):
            # Without the dashes every option shares, which would make '--bogus' near '--out'.
            meant = difflib.get_close_matches(given[2:], [flag[2:] for flag in known], n=1)
            if meant:
                command.error(f"unknown option {given}: did you mean --{meant[0]}?")


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``aggregate`` and its options, each with its help."""
    parser = _Parser(prog="pytest-rollouts", description=__doc__.splitlines()[0].replace("``", ""))
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    merge = commands.add_parser("aggregate", help="merge shard outputs (or rescore one run) and score them as one run")
    COMMANDS["aggregate"] = merge
    _add_merge_options(merge)
    _add_scoring_options(merge)
    add_comparison_commands(commands)
    add_report_command(commands)
    add_status_command(commands)
    COMMANDS.update(commands.choices)
    return parser


def _add_merge_options(merge: argparse.ArgumentParser) -> None:
    """What ``aggregate`` merges, where to, and what it takes on trust."""
    merge.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="GLOB[,GLOB...]",
        help="shard <stem>.jsonl files, or one whole run's to rescore it (repeatable; each value adds its globs)",
    )
    merge.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="the merged output, a <stem>.jsonl file; an earlier one is moved into a <stem>.prev-<time> "
        "folder beside it, as a run moves its earlier results",
    )
    merge.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier merged output instead of moving it aside, as --rollouts-overwrite in a run",
    )
    merge.add_argument(
        "--trust-shards",
        action="store_true",
        help="take inputs without a run manifest (NeMo Gym's) as the whole run, so --require-complete can pass; "
        "nothing then proves that no shard is missing",
    )


def _add_scoring_options(merge: argparse.ArgumentParser) -> None:
    """The scoring options mean here what they mean in a run: their metavars and help are the run's."""
    merge.add_argument(
        "--count-as-zero",
        action="append",
        default=[],
        metavar=OPTION["count_as_zero"].metavar,
        help=OPTION["count_as_zero"].argparse_help,
    )
    merge.add_argument(
        "--count-missing-as-zero", action="store_true", help=OPTION["count_missing_as_zero"].argparse_help
    )
    merge.add_argument("--require-complete", action="store_true", help=OPTION["require_complete"].argparse_help)
    merge.add_argument(
        "--fail-under",
        default=None,
        metavar=OPTION["fail_under"].metavar,
        help=OPTION["fail_under"].argparse_help,
    )
    for name, kind in STATISTICS_OPTIONS.items():
        flag = "--" + name.replace("_", "-")
        option = OPTION[name]
        if option.flag:  # None unless given, as the valued ones: only what was given is validated
            merge.add_argument(flag, action="store_const", const=True, help=option.argparse_help, dest=name)
            continue
        merge.add_argument(flag, type=kind, default=None, metavar=option.metavar, help=option.argparse_help, dest=name)
    merge.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar=OPTION["agent"].metavar,
        help="where a group's /aggregate_metrics lives (a URL alone: every group's), as in a run; "
        "without it metrics are computed locally",
    )
    merge.add_argument(
        "--agent-header",
        action="append",
        default=[],
        metavar=OPTION["agent_header"].metavar,
        help="header for /aggregate_metrics, as in a run (${VAR} is read from the environment); "
        f"adds to env {HEADERS_ENV}, one per line",
    )
    merge.add_argument(
        "--timeout",
        default=None,
        metavar=OPTION["timeout"].metavar,
        help="seconds a group's whole /aggregate_metrics request may take, reply included "
        f"(default {OPTION['timeout'].shown_default}), "
        "as --rollouts-timeout in a run; past it, metrics are computed locally",
    )


def aggregate(args: argparse.Namespace) -> int:
    try:
        out, settings = _validated(args)
    except ValueError as exc:  # the message never echoes a header's value
        print(f"pytest-rollouts aggregate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # It writes a run's artifacts, so it holds the output as a run does: it never overwrites a
    # run in progress, nor does a run start on files it is writing.
    lock = RunLock(out.lock, out.out, "--out")
    life = RunLifecycle(out, lock=lock)
    try:
        merged = _merge(args, settings, life)
    except (OutputBusy, OutputIsInput) as exc:
        print(f"pytest-rollouts aggregate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MergeError as exc:
        print(f"pytest-rollouts aggregate: the inputs do not form one run:\n{exc}", file=sys.stderr)
        return EXIT_NOT_ONE_RUN
    except JsonlError as exc:  # a row that cannot be read: the inputs are no run
        print(f"pytest-rollouts aggregate: {exc}", file=sys.stderr)
        return EXIT_NOT_ONE_RUN
    except Refusal as refusal:  # a row the score cannot read, or an output that cannot be prepared
        print(f"pytest-rollouts aggregate: {refusal}", file=sys.stderr)
        return EXIT_NOT_ONE_RUN if refusal.where == "score" else EXIT_UNWRITABLE
    except ArtifactError as exc:
        print(f"pytest-rollouts aggregate: {exc}", file=sys.stderr)
        return EXIT_UNWRITABLE
    finally:
        lock.release()
    return _conclude(args, settings, life, merged)


@datatype(frozen=True)
class _Merged:
    inputs: int
    manifest: RunManifest | None
    start: RunStart
    score: RunScore


def _merge(args: argparse.Namespace, settings: Settings, life: RunLifecycle) -> _Merged:
    """The lifecycle with the merge as the run's plan and its rows at once: the inputs checked to
    form one run, the output taken (an earlier one moved aside), the merge written, then scored."""
    out, lock = life.paths, life.lock
    assert lock is not None
    inputs = find_inputs(args.input, out.out)
    for path in inputs:  # a shard still being written would merge as a smaller run
        busy = RunLock(ArtifactPaths(path).lock, path, "--input").busy()
        if busy:
            raise OutputBusy(busy)
    shards = load_shards(inputs)
    manifest, problems = check(shards)
    if problems:
        raise MergeError("\n".join(f"  - {p}" for p in problems))
    run_id = uuid.uuid4().hex
    try:
        lock.acquire(run_id)
    except OSError as exc:
        raise ArtifactError(f"cannot write {out.out}: {exc.strerror or exc}") from exc
    start = life.take(run_id, resuming=False, overwrite=args.overwrite)
    try:
        write_merged(shards, manifest, out)
    except ArtifactError as exc:  # the earlier output comes back: nothing of this merge is left
        raise ArtifactError(f"{exc}{life.put_back()}") from None
    life.sent()
    return _Merged(len(shards), manifest, start, life.score(settings, agent_url=partial(_metrics_url, settings)))


def _conclude(args: argparse.Namespace, settings: Settings, life: RunLifecycle, merged: _Merged) -> int:
    """What the merge did and its score, printed; the verdict of its gates, its exit status."""
    out, score = life.paths, merged.score
    print(f"merged {merged.inputs} input{'' if merged.inputs == 1 else 's'} into {out.out}")
    for notice in start_notices(merged.start, out.out, resume=None, overwrite="--overwrite"):
        print(notice)
    if merged.manifest is None:
        print(UNPROVEN)
    for line in score_lines(score, str(out.failures), "--count-as-zero", count_as_zero=settings.count_as_zero):
        print(line)
    if score.metrics_error:  # as any artifact the merge cannot write: 1, whatever the gate
        print(f"pytest-rollouts aggregate: {score.metrics_error}", file=sys.stderr)
        return EXIT_UNWRITABLE
    print(f"metrics: {score.metrics_path}")
    gate = Gate(
        args.require_complete,
        settings.fail_under,
        out=str(out.out),
        fail_under_option="--fail-under",
        gate_on=settings.gate_on,
    )
    verdict = life.conclude(score, RunEnd(), gate)
    unproven = merged.manifest is None and args.require_complete and not args.trust_shards
    if unproven and verdict.exit_code != EXIT_INCOMPLETE:  # as the gate puts completeness before the threshold
        verdict = replace(verdict, exit_code=EXIT_INCOMPLETE, problems=(UNPROVEN_REFUSED,))
    for measure in verdict.measures:  # what each gate compared, passed or not
        print(measure)
    for problem in verdict.problems:
        print(problem, file=sys.stderr)
    return verdict.exit_code


def _validated(args: argparse.Namespace) -> tuple[ArtifactPaths, Settings]:
    """The options a run has too, checked by the run's own rules before anything is read or
    written, so the merge refuses what the run refuses: an ``--out`` not named ``<stem>.jsonl``
    would get sidecars named after a stem that another run's may already use, and a bad
    ``--agent`` would only fail once the merged files are written. ``ValueError`` says what is
    wrong.

    Headers combine as a run's do: the environment's, then ``--agent-header`` replacing any
    with the same agent and name, and one header given twice within one of them is refused.
    The settings carry them, and the scoring policy, so the merged run is scored as a run is."""
    try:
        given = {"out": args.out, "agent": args.agent, "fail_under": args.fail_under, "timeout": args.timeout}
        given.update(count_as_zero=args.count_as_zero, count_missing_as_zero=args.count_missing_as_zero)
        given.update({name: getattr(args, name) for name in STATISTICS_OPTIONS})
        flags = {name: "--" + name.replace("_", "-") for name in given}
        settings = Settings.model_validate(
            {name: value for name, value in given.items() if value is not None}, context={"sources": flags}
        )
    except ValidationError as exc:
        raise ValueError(describe_errors(exc, flags)) from None
    out = Path(args.out).resolve()
    if out.is_dir():
        raise ValueError(f"--out: {out} is a directory; name the output file in it")
    sources = [(HEADERS_ENV, os.environ.get(HEADERS_ENV, "").splitlines()), ("--agent-header", args.agent_header)]
    given = [(where, lines) for where, lines in sources if any(line.strip() for line in lines)]
    try:
        headers = combine_layers("agent_header", given)[0] if given else ()
    except SettingsError as exc:
        raise ValueError(str(exc)) from None
    return ArtifactPaths(out), settings.model_copy(update={"agent_header": headers})


def _metrics_url(settings: Settings, name: str) -> str | None:
    """Where a group's ``/aggregate_metrics`` lives: its ``--agent``, else the one for every group."""
    return settings.named_agent_urls.get(name, settings.default_agent_url)


if __name__ == "__main__":
    sys.exit(main())
