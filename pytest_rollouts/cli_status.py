"""``pytest-rollouts status OUT [--json]``: how a run writing OUT is going, from its live status file.

``cli.py`` adds this command to its parser. It reads ``<OUT>.status.json`` (``store/status.py``),
which the run replaces every ``--rollouts-status-interval``, and says it for a person, or as JSON.
Exit codes: 0 the status was read, 1 it is stale (the run says it is running but its process is
gone: killed, or its machine went down), 4 there is no status file there (or it is not one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

from pytest_rollouts.store.status import RUNNING, SUFFIX, RunStatus, StatusError, read_status, status_path

EXIT_USAGE = 4  # cli.py's: every usage error of every command
EXIT_STALE = 1
# A running run's file older than this many of its intervals (and a minute) is said to be behind.
BEHIND_INTERVALS = 10


def add_status_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    status = commands.add_parser("status", help="how a run is going: its live status file <OUT>.status.json")
    status.add_argument("out", metavar="OUT", help="the run's output <stem>.jsonl (or its .status.json)")
    status.add_argument("--json", action="store_true", help="print the status file's JSON, with 'stale' added")


def status_command(args: argparse.Namespace) -> int:
    given = Path(args.out)
    path = given if given.name.endswith(SUFFIX) else status_path(given)
    try:
        status = read_status(path)
    except StatusError as exc:
        print(f"pytest-rollouts status: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stale = status.writer_gone()
    if args.json:
        sys.stdout.write(orjson.dumps({**status.as_json(), "stale": stale}, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print("\n".join(status_lines(status, stale, time.time())))
    return EXIT_STALE if stale else 0


def status_lines(status: RunStatus, stale: bool, now: float) -> list[str]:
    """The status as a person reads it: how the run stands, its counts, its pace, what waits longest."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status.started_at))
    lines = [
        f"{status.out}: {status.state} (pid {status.pid} on {status.host}, started {started}, "
        f"{duration(now - status.started_at)} ago; updated {duration(now - status.updated_at)} ago)"
    ]
    if stale:
        lines.append(
            f"stale: process {status.pid} is gone and never said the run ended (killed, or crashed); "
            "--rollouts-resume runs what has no row yet"
        )
    elif status.state == RUNNING and now - status.updated_at > max(60.0, BEHIND_INTERVALS * status.interval_s):
        lines.append(
            f"behind: not updated for {duration(now - status.updated_at)} (every {status.interval_s:g}s expected)"
        )
    share = f" ({100 * status.done / status.total:.0f}%)" if status.total else ""
    counts = [f"done {status.done}/{status.total or '?'}{share}"]
    if status.failed:
        classes = ", ".join(f"{n} {name}" for name, n in sorted(status.failed.items()))
        counts.append(f"failed {sum(status.failed.values())} ({classes})")
    # Under auto:MAX, each agent's adaptive limit now, which the limit sums.
    each = ", ".join(f"{name} {n}" for name, n in sorted(status.limits.items()))
    counts.append(f"in flight {status.in_flight} (limit {status.limit}{f': {each}' if each else ''})")
    lines.append("  " + ", ".join(counts))
    if status.rate_per_s is not None:
        eta = f", ETA {duration(status.eta_s)}" if status.eta_s is not None else ""
        lines.append(f"  rate {status.rate_per_s:.3g}/s over the last minute{eta}")
    oldest = status.oldest_in_flight
    if oldest is not None:
        lines.append(f"  oldest in flight: task {oldest.task} rollout {oldest.rollout}, {duration(oldest.age_s)}")
    return lines


def duration(seconds: float) -> str:
    """``seconds`` as ``45s``, ``3m12s`` or ``2h05m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
