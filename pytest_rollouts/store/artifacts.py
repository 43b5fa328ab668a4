"""A run's files, all derived from the output path ``<stem>.jsonl``, and their lifecycle.

A fresh run never overwrites earlier results unless asked to: it moves them into a dated folder
next to them (or, overwriting, deletes them). A resumed run repairs a line a hard kill cut
short. Both happen once per run, however many xdist workers share the files.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

from pytest_rollouts.datatype import datatype
from pytest_rollouts.store.jsonl import JsonlError, dumps, parse_object, scan_lines

# Every row of a run's files (materialized inputs, outputs, failures) names its rollout by these two
# stamps, and the rows read here are checked for them.
from pytest_rollouts.store.stamps import ROLLOUT_INDEX, TASK_INDEX

# What a run's files add to its stem, but its output's ``.jsonl`` (NeMo Gym's names).
FAILURES = "_failures.jsonl"
MATERIALIZED = "_materialized_inputs.jsonl"
METRICS = "_aggregate_metrics.json"
MANIFEST = "_run_manifest.json"


@datatype
class RunStart:
    """What preparing the artifacts did, for the user to be told.

    ``kept``: how many earlier sets (``<stem>.prev-*`` folders) lie beside the output afterwards,
    so a user whose reruns pile them up learns it. ``replaced``: earlier results are deleted (with
    ``--rollouts-overwrite``): they wait in ``moved_to``, a hidden folder, until the run sends its
    first request (``discard``), so a run refused or stopped before that puts them back.
    """

    moved_to: Path | None = None
    repaired: dict[Path, int] | None = None
    kept: int = 0
    replaced: bool = False
    # Whether it made the ``prepared`` file, which a run refused before any request removes.
    made_prepared: bool = False
    # Another process of the same run (the first xdist worker) prepared the files: this one reads
    # them as they are and leaves the run's manifest to it, so the manifest is written by one hand.
    joined: bool = False


@datatype
class ArtifactPaths:
    """Every file of the run whose output is ``out``, named from it as NeMo Gym names them."""

    out: Path
    # Where this run writes its materialized inputs (``--rollouts-materialized``); None: where the
    # run's manifest recorded them (``materialized``), else beside the output.
    materialized_at: Path | None = None

    def _sibling(self, suffix: str) -> Path:
        return self.out.with_name(self.out.stem + suffix)

    @property
    def failures(self) -> Path:
        return self._sibling(FAILURES)

    @property
    def materialized(self) -> Path:
        """The materialized inputs: where this run was told to write them, or where the recorded
        run wrote them, so a resume, ``aggregate`` and ``compare`` need no option to find them.

        Beside the output when the recorded place holds nothing and that file exists: a run's
        earlier set moved aside (``<stem>.prev-*``) keeps its inputs beside its outputs."""
        if self.materialized_at is not None:
            return self.materialized_at
        beside = self.beside_materialized
        recorded = recorded_materialized(self.manifest)
        if recorded is None or (not recorded.exists() and beside.exists()):
            return beside
        return recorded

    @property
    def beside_materialized(self) -> Path:
        """The materialized inputs' default place, and their name in a set moved aside."""
        return self._sibling(MATERIALIZED)

    @property
    def metrics(self) -> Path:
        return self._sibling(METRICS)

    @property
    def manifest(self) -> Path:
        return self._sibling(MANIFEST)

    @property
    def lock(self) -> Path:
        """Held by the session writing the output, for its whole run (``runlock``)."""
        return self.out.with_name("." + self.out.name + ".lock")

    @property
    def prepared(self) -> Path:
        """Which run last prepared the files; locked while a process prepares them."""
        return self.out.with_name("." + self.out.name + ".prepared")

    def all(self) -> tuple[Path, ...]:
        return (self.out, self.failures, self.materialized, self.metrics, self.manifest)

    def _earlier(self) -> list[tuple[Path, str]]:
        """The files an earlier run left (its materialized inputs where its manifest says), and
        this run's materialized file if something is there already, each with its name in a set
        moved aside: the names beside the output, so the set reads as a run of its own."""
        found = [(path, path.name) for path in (self.out, self.failures, self.metrics, self.manifest)]
        found.append((ArtifactPaths(self.out).materialized, self.beside_materialized.name))
        if self.materialized_at is not None and self.materialized_at != found[-1][0]:
            found.append((self.materialized_at, self.beside_materialized.name))
        return found

    def start_run(
        self, run_id: str, *, resume: bool, overwrite: bool = False, mend: Callable[[], object] | None = None
    ) -> RunStart:
        """Prepare the files once per run: the first process of ``run_id`` to lock ``prepared`` does it.

        A fresh run moves earlier results aside, or with ``overwrite`` deletes them. A resume
        repairs them, then calls ``mend`` (which rewrites them for the run's options: moving judged-
        invalid results to the sidecar) while it alone holds them.

        Later processes of the same run (xdist workers) find the id recorded and leave the
        files alone, so no worker can disturb rows another worker already wrote. Not the run
        lock, which every process of the run holds shared until it ends.
        """
        self.out.parent.mkdir(parents=True, exist_ok=True)
        made = not self.prepared.exists()
        with open(self.prepared, "a+", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.seek(0)
            if lock.read() == run_id:
                return RunStart(joined=True)
            if resume:
                start = RunStart(repaired=self._repair())
                if mend is not None:
                    mend()
            elif overwrite:
                moved = self._move_aside(f".{self.out.stem}.replaced")
                start = RunStart(moved_to=moved, kept=len(self.earlier_sets()), replaced=moved is not None)
            else:
                start = RunStart(moved_to=self._move_aside(f"{self.out.stem}.prev"), kept=len(self.earlier_sets()))
            start = replace(start, made_prepared=made)
            lock.seek(0)
            lock.truncate()
            # Not fsynced: only live processes of this run read it, once the flock goes with the file's
            # close (which writes it out first); a crash's next run has another id and prepares again.
            lock.write(run_id)
            return start

    def take_back(self, start: RunStart) -> None:
        """Undo a fresh run's start: it was refused before sending anything, so its new files go
        and the earlier results it moved aside come back. Files holding rows are no fresh run's
        that sent nothing: they are left as they are, whoever asked."""
        if any(path.exists() and path.stat().st_size for path in (self.out, self.failures)):
            return
        for path in self.all():
            path.unlink(missing_ok=True)
        if start.moved_to is not None:
            for moved in start.moved_to.iterdir():
                os.replace(moved, self.out.with_name(moved.name))
            start.moved_to.rmdir()

    @staticmethod
    def discard(start: RunStart) -> None:
        """The run sent its first request: the earlier results it replaces are gone for good."""
        if start.replaced and start.moved_to is not None:
            shutil.rmtree(start.moved_to, ignore_errors=True)

    def started_by(self, run_id: str) -> bool:
        """Whether the files were last prepared by run ``run_id``."""
        try:
            return self.prepared.read_text(encoding="utf-8") == run_id
        except FileNotFoundError:
            return False

    def moved_aside(self) -> list[Path]:
        """Every folder fresh runs moved earlier results into: the sets kept, and those waiting to be
        replaced (``--rollouts-overwrite``) until their run's first request."""
        hidden = self.out.parent.glob(f".{glob.escape(self.out.stem)}.replaced-*")
        return self.earlier_sets() + sorted(p for p in hidden if p.is_dir())

    def owner(self) -> Callable[[Path], bool]:
        """Whether a path is one of the run's files, or in a set of earlier results moved aside: a
        suite whose dataset patterns match it must not collect a run's own output as a dataset.
        The files are looked up once (the manifest read, the folders listed), for every path asked."""
        mine = {p.resolve() for p in (*self.all(), self.beside_materialized)}
        folders = [folder.resolve() for folder in self.moved_aside()]

        def owns(path: Path) -> bool:
            path = path.resolve()
            return path in mine or any(path.is_relative_to(folder) for folder in folders)

        return owns

    def earlier_sets(self) -> list[Path]:
        """The folders earlier fresh runs moved their predecessors' results into."""
        return sorted(p for p in self.out.parent.glob(f"{glob.escape(self.out.stem)}.prev-*") if p.is_dir())

    def _has_results(self) -> bool:
        """Any file not empty: a run whose every rollout failed has only its sidecar (the attempts,
        terminal verdicts) and one killed before any row only its materialized inputs, and either
        is what a resume of it would have gone on."""
        return any(path.exists() and path.stat().st_size for path, _ in self._earlier())

    def _move_aside(self, prefix: str) -> Path | None:
        """Earlier artifacts go into a dated folder ``<prefix>-<time>``; empty ones are only deleted."""
        if not self._has_results():
            for path, _ in self._earlier():
                path.unlink(missing_ok=True)
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        folder = self.out.with_name(f"{prefix}-{stamp}")
        suffix = 1
        while folder.exists():
            suffix += 1
            folder = self.out.with_name(f"{prefix}-{stamp}-{suffix}")
        folder.mkdir()
        for path, name in self._earlier():
            if path.exists() and not (folder / name).exists():
                shutil.move(path, folder / name)  # a rename, unless the inputs are on another file system
        return folder

    def _repair(self) -> dict[Path, int]:
        dropped = {path: repair_tail(path) for path in (self.out, self.failures)}
        return {path: size for path, size in dropped.items() if size}


def recorded_materialized(manifest: Path) -> Path | None:
    """Where a run's manifest says its materialized inputs are (relative to the manifest, so a
    results tree moved whole still finds them), or None: none recorded, or no readable manifest."""
    try:
        where = json.loads(manifest.read_bytes()).get("materialized")
    except (OSError, ValueError, AttributeError):
        return None
    return manifest.parent / where if isinstance(where, str) and where else None


def rows_digest(path: Path) -> str:
    """The materialized inputs' fingerprint, which the run manifest records (``RowsDigest``)."""
    digest = RowsDigest()
    with open(path, "rb") as handle:
        for line in handle:
            digest.add(line.rstrip(b"\r\n"))
    return digest.hex()


class RowsDigest:
    """The sha256 of each line, summed, so it names the set of rows whatever their order (a run's
    rows reordered are still its rows) and any row changed, added or dropped changes it. Taken as
    the rows are written (``plan.build.materialize``), it spares reading the file back."""

    __slots__ = ("_total",)

    def __init__(self) -> None:
        self._total = 0

    def add(self, line: bytes) -> None:
        """One line, without its line break."""
        self._total += int.from_bytes(hashlib.sha256(line).digest())

    def hex(self) -> str:
        return f"{self._total % (1 << 256):064x}"


def repair_tail(path: Path) -> int:
    """Drop a last line that a hard kill cut short; return how many bytes were dropped."""
    cut = torn_tail(path)
    if cut:
        with open(path, "r+b") as handle:
            handle.truncate(handle.seek(0, os.SEEK_END) - cut)
            handle.flush()
            os.fsync(handle.fileno())
    return cut


DERIVED_SUFFIXES = (FAILURES, MATERIALIZED, METRICS, MANIFEST)


def owning_run(path: Path) -> ArtifactPaths | None:
    """The run ``path`` is one of the files of, when a run is there (its manifest or materialized
    inputs on disk, or its output locked by a session writing it): a report, a comparison's JSON or
    another run's output written there would replace that run's rows. None for any other path."""
    name = path.name
    stems = [name[: -len(suffix)] for suffix in DERIVED_SUFFIXES if name.endswith(suffix)]
    if name.endswith(".jsonl"):
        stems.append(name[: -len(".jsonl")])
    target = path.resolve()
    for stem in filter(None, stems):
        run = ArtifactPaths(path.with_name(stem + ".jsonl"))
        there = any(p.exists() for p in (run.manifest, run.beside_materialized, run.lock))
        if there and target in {p.resolve() for p in run.all()}:
            return run
    return None


def torn_tail(path: Path) -> int:
    """How many bytes follow the last newline: a last line cut short (0 when whole, empty or absent)."""
    if not path.exists():
        return 0
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        return size - _end_of_last_line(handle, size)


def _end_of_last_line(handle: Any, size: int) -> int:
    block = 1 << 16
    position = size
    while position > 0:
        start = max(0, position - block)
        handle.seek(start)
        chunk = handle.read(position - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return 0


class ArtifactRow(NamedTuple):
    line_no: int
    offset: int
    size: int  # bytes, without the newline: exactly the request body, for materialized rows
    row: dict[str, Any]


def artifact_rows(path: Path) -> Iterator[ArtifactRow]:
    """Every row of an artifact we wrote, and where it sits; none if the file is absent.

    A malformed line is an error naming file and line. A last line without its newline
    is skipped rather than reported: after the repair at the start of a resume, it can
    only be a row another process is appending now.
    """
    if not path.exists():
        return
    for line_no, offset, line in scan_lines(path):
        if not line.endswith(b"\n"):
            return
        yield ArtifactRow(line_no, offset, len(line) - 1, run_row(line, path, line_no))


def run_row(line: bytes, path: Path, line_no: int) -> dict[str, Any]:
    """One row of a run's file, with its task and rollout index checked here, where the file and
    line are known: a row without them (an edit, another tool's file) is ``JsonlError`` naming
    both, never a KeyError deep in resume or scoring, which key every row by them."""
    row = parse_object(line, path, line_no)
    for name in (TASK_INDEX, ROLLOUT_INDEX):
        value = row.get(name)
        if not is_index(value):
            found = f"no {name}" if name not in row else f"{name} is {dumps(value).decode()[:40]}"
            raise JsonlError(
                f"{path}:{line_no}: {found}; every row of a run names its rollout by {TASK_INDEX} and "
                f"{ROLLOUT_INDEX}, whole numbers from 0"
            )
    return row


def is_index(value: object) -> TypeGuard[int]:
    """A task or rollout index: a whole number from 0 (``true`` is no index, nor is 1.0)."""
    return type(value) is int and value >= 0


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    return (entry.row for entry in artifact_rows(path))
