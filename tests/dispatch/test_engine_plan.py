"""The dispatcher process holds the plan pytest sends it in a few bytes a rollout: the columns at the
widths the plan holds them, and its index of each task's rollouts in one array, not a list of int
objects per task (at a million rollouts, 50 MB)."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

from pytest_rollouts.dispatch.engine import Engine
from pytest_rollouts.dispatch.record import DispatchRecord, LimitSeries
from pytest_rollouts.rows.planned import COLUMNS, PlannedRollout, PlannedRollouts
from pytest_rollouts.store.status import RunStatus

from ..helpers import plan_header


def test_the_dispatcher_indexes_a_plan_of_50k_rollouts_in_under_20_bytes_each(tmp_path: Path) -> None:
    tasks, repeats = 3125, 16
    rollouts = PlannedRollouts(
        PlannedRollout(task, task, repeat, "a", 100 * (task * repeats + repeat), 99)
        for repeat in range(repeats)
        for task in range(tasks)
    )
    columns = {name: rollouts.column(name) for name in COLUMNS}
    (tmp_path / "m.jsonl").touch()
    header = plan_header(
        urls={"a": "http://127.0.0.1:9"},
        bodies=str(tmp_path / "m.jsonl"),
        out=str(tmp_path / "r.jsonl"),
        failures=str(tmp_path / "f.jsonl"),
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        engine = Engine(header, columns, lambda data: None)
        held = tracemalloc.get_traced_memory()[0] - before
        del engine
    finally:
        tracemalloc.stop()
    assert held / len(rollouts) < 20


def test_the_dispatcher_process_starts_without_the_email_package() -> None:
    """Its start-up is part of every run, a one-row run's most of all: ``email`` (a dozen modules)
    is only for a ``Retry-After`` given as a date, and imported when one comes."""
    code = "import sys, pytest_rollouts.dispatch.engine\nprint(sorted(m for m in sys.modules if m.startswith('email')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_dispatcher_process_starts_without_the_run_files_lifecycle() -> None:
    """The rows it stamps named their two stamps from the run's files' lifecycle (``store/artifacts.py``),
    which brought hashlib, shutil, glob, bz2 and lzma into every dispatcher's start-up, a one-row
    run's too: the dispatcher writes rows, it never moves, repairs or digests a run's files."""
    never = {"pytest_rollouts.store.artifacts", "hashlib", "shutil", "glob", "bz2", "lzma"}
    code = f"import sys, pytest_rollouts.dispatch.engine\nprint(sorted(set(sys.modules) & {never!r}))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_record_and_status_types_built_at_every_start_up_are_not_frozen() -> None:
    """Building a frozen dataclass costs nearly twice a plain one's (three more generated methods), and
    the dispatcher's record types are built by both processes at every start-up, the status by every
    session; their fields hold lists and dicts, so frozen only refused assignment."""
    for cls in (LimitSeries, DispatchRecord, RunStatus):
        assert not cls.__dataclass_params__.frozen, cls.__name__  # type: ignore[attr-defined]
