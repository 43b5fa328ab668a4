"""One writer per output: a session holds ``.<name>.lock`` from before it touches the files until it ends.

Two sessions writing one output double keys (two resumes each re-send what is missing) or
destroy each other's results (a fresh run moves the files of a running one aside), and
both exit 0. So a second session is refused before it moves or sends anything, told who
holds the output.

The lock is an ``flock``, not a pid file: the kernel releases it when its holder dies,
SIGKILL included, so a lock a killed run left is simply free to take, with no pid check
(pids are reused, and a holder on another host sharing the directory has no pid here). The
holder writes who it is into the file, for the refusal to name, and empties it on a clean
release: a holder found in a free lock is a run that was killed, which the new one says it
takes over. A run refused before any request removes the lock file it made (``withdraw``), so
the place is as it found it; a session that opened that file just before finds, once it holds
the lock, that the file it locked is no longer the one at the path, and takes the new one.

Under xdist the controller takes the lock before any worker starts, and its workers join
it: all of them hold it shared, which nobody can take exclusively while any of them lives.
The workers count: a controller killed with SIGKILL leaves its workers running for seconds
(execnet's grace before they stop), their dispatchers still appending rows.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from dataclasses import asdict
from pathlib import Path

import orjson

from pytest_rollouts.datatype import datatype


@datatype
class Holder:
    """Who holds (or last held) an output, as written in its lock file."""

    run_id: str
    pid: int
    host: str
    started: str

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}, started {self.started}"

    def gone(self) -> bool:
        return self.host == socket.gethostname() and not alive(self.pid)


class OutputBusy(Exception):
    """Another session holds the output; the message names it and says what to do."""


class RunLock:
    def __init__(self, path: Path, out: Path, option: str = "--rollouts-out") -> None:
        self.path = path
        self._out = out
        self._option = option  # how the user names the output, for the refusal
        self._fd: int | None = None
        # What taking the lock made: the folders, deepest first, and whether the file itself.
        self._made_folders: list[Path] = []
        self._made_file = False

    def acquire(self, run_id: str, *, shared: bool = False) -> Holder | None:
        """Take the output for a new run, or raise ``OutputBusy``; return the holder of a killed
        run whose lock this takes over, or None.

        Always exclusive first, so a session sharing it can only be this run's xdist workers;
        ``shared`` (an xdist controller) then lets them join. That step is not atomic (flock
        drops the lock, then takes it shared): whoever won the gap has written its name, and
        this session, finding it, gives way.
        """
        fd = self._take(fcntl.LOCK_EX)
        left = _read(fd)
        me = Holder(run_id, os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        _write(fd, orjson.dumps(asdict(me)))
        self._fd = fd
        if shared:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                self._fd = None
                os.close(fd)
                raise OutputBusy(self._busy(None)) from None
            holder = _read(fd)
            if holder is None or holder.run_id != run_id:
                self.release()
                raise OutputBusy(self._busy(holder))
        return left

    def join(self, run_id: str | None) -> None:
        """An xdist worker shares the lock its controller took for ``run_id``; ``OutputBusy`` if
        another session holds it. ``None``: the controller took none (a suite configured by its
        declaration alone, which the controller never reads), and the workers share it among
        themselves."""
        fd = self._take(fcntl.LOCK_SH)
        holder = _read(fd)
        if run_id is not None and (holder is None or holder.run_id != run_id):
            os.close(fd)
            raise OutputBusy(self._busy(holder))
        self._fd = fd

    def busy(self) -> str | None:
        """Why the output cannot be read as a finished run (a session is writing it), or None;
        takes nothing and creates nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self._busy(_read(fd))
        finally:
            os.close(fd)
        return None

    def release(self) -> None:
        """Let the output go; a controller or single session also says it ended cleanly."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        holder = _read(fd)
        if holder is not None and holder.pid == os.getpid():
            os.ftruncate(fd, 0)
        os.close(fd)

    def withdraw(self) -> None:
        """Let the output go as a run refused before any request does: without the lock file and
        folders taking it made, so the place is as the run found it."""
        if self._fd is not None and self._made_file:
            self.path.unlink(missing_ok=True)
        self.release()
        for folder in self._made_folders:
            try:
                folder.rmdir()
            except OSError:  # something else is in it now
                break
        self._made_folders, self._made_file = [], False

    def _open(self) -> int:
        missing = [folder for folder in (self.path.parent, *self.path.parent.parents) if not folder.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._made_folders = self._made_folders or missing
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._made_file = True
        return fd

    def _take(self, mode: int) -> int:
        """The lock file, open and locked in ``mode`` without waiting; ``OutputBusy`` naming its holder."""
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise OutputBusy(self._busy(holder)) from None
            if _same_file(fd, self.path):
                return fd
            os.close(fd)  # a refused run withdrew it between this open and this lock: take the new one

    def _busy(self, holder: Holder | None) -> str:
        who = ""
        if holder is not None:
            gone = "; that process is gone, its xdist workers are still finishing" if holder.gone() else ""
            who = f" ({holder}{gone})"
        return (
            f"{self._out} is being written by another session{who}: one session writes an output at "
            f"a time. Wait for it to end, or choose another {self._option}"
        )


def _read(fd: int) -> Holder | None:
    try:
        data = os.pread(fd, 4096, 0)
        return Holder(**orjson.loads(data)) if data.strip() else None
    except (orjson.JSONDecodeError, TypeError):
        return None  # an empty file, or a lock file an older version wrote: nobody's


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path``."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)


def _write(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one owned by another user, which we may not signal, does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
