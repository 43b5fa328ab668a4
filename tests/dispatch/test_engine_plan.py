"""The dispatcher process holds the plan pytest sends it in a few bytes a rollout: the columns at the
widths the plan holds them, and its index of each task's rollouts in one array, not a list of int
objects per task (at a million rollouts, 50 MB)."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from pytest_rollouts.dispatch.engine import Engine
from pytest_rollouts.dispatch.record import DispatchRecord, LimitSeries
from pytest_rollouts.net.address import ascii_host
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


# What a dispatcher's start-up (part of every run, a one-row run's most of all) must not import, and why.
NOT_AT_START_UP = {
    # A ``Retry-After`` given as a date needs ``email`` (a dozen modules): imported when one comes.
    "email": {"email"},
    # The rows it stamps once named their stamps from the run files' lifecycle, which brought hashlib,
    # shutil, glob, bz2 and lzma: the dispatcher writes rows, it never moves, repairs or digests files.
    "run files": {"pytest_rollouts.store.artifacts", "hashlib", "shutil", "glob", "bz2", "lzma"},
    # Only a dispatch budget's margin takes quantiles (``statistics``, with ``fractions`` and
    # ``decimal``), and only ``--rollouts-parallel auto:MAX`` adapts limits.
    "budget and adaptive": {"statistics", "fractions", "pytest_rollouts.dispatch.concurrency"},
}


@pytest.mark.parametrize("what", NOT_AT_START_UP)
def test_the_dispatcher_process_starts_without_what_few_runs_need(what: str) -> None:
    never = NOT_AT_START_UP[what]
    # Only what the import adds: an interpreter's own start-up (a site-packages ``.pth`` file) may load any.
    code = (
        "import sys\nbefore = set(sys.modules)\nimport pytest_rollouts.dispatch.engine\n"
        f"print(sorted((set(sys.modules) - before) & {never!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


HOSTS = [
    "agent",
    "127.0.0.1",
    "a.example.com",
    "a.example.com.",
    "",
    ".",
    "a..b",
    ".a",
    "a" * 63,
    "a" * 64,
    "b." + "a" * 64,
    "a" * 64 + ".b",
    "::1",
]


@pytest.mark.parametrize("host", HOSTS)
def test_an_ascii_host_is_refused_exactly_where_the_idna_codec_refuses_it(host: str) -> None:
    try:
        host.encode("idna")
    except UnicodeError:
        with pytest.raises(UnicodeError):
            ascii_host(host)
    else:
        assert ascii_host(host) == host


def test_reading_an_agent_url_loads_no_codec() -> None:
    """The IDNA codec (``unicodedata``, ``stringprep``) cost each process that read an ASCII host its
    import: pytest's at every start, the dispatcher's at the health check pytest waits for."""
    code = (
        "import sys\nfrom pytest_rollouts.net.address import Address\n"
        "from pytest_rollouts.config.values import check_url\n"
        "check_url('http://agent.example:8000'); Address.parse('http://127.0.0.1:1/run')\n"
        "print('encodings.idna' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False", result.stdout + result.stderr


def test_the_record_and_status_types_built_at_every_start_up_are_not_frozen() -> None:
    """Building a frozen dataclass costs nearly twice a plain one's (three more generated methods), and
    the dispatcher's record types are built by both processes at every start-up, the status by every
    session; their fields hold lists and dicts, so frozen only refused assignment."""
    for cls in (LimitSeries, DispatchRecord, RunStatus):
        assert not cls.__dataclass_params__.frozen, cls.__name__  # type: ignore[attr-defined]
