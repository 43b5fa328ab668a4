"""Where a run's artifacts live, all derived from the output path ``<stem>.jsonl``."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ArtifactPaths:
    out: Path

    def _sibling(self, suffix: str) -> Path:
        return self.out.with_name(self.out.stem + suffix)

    @property
    def failures(self) -> Path:
        return self._sibling("_failures.jsonl")

    @property
    def materialized(self) -> Path:
        return self._sibling("_materialized_inputs.jsonl")

    @property
    def metrics(self) -> Path:
        return self._sibling("_aggregate_metrics.json")

    @property
    def lock(self) -> Path:
        return self.out.with_name("." + self.out.name + ".lock")

    def start_run(self, run_id: str) -> None:
        """Empty the outputs once per run, however many processes (xdist workers) share it.

        The first process of run ``run_id`` to take the lock truncates and records the id;
        the others find it recorded and only append, so no worker can wipe rows another
        worker already wrote.
        """
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a+", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.seek(0)
            if lock.read() != run_id:
                for path in (self.out, self.failures):
                    with open(path, "wb"):
                        pass
                lock.seek(0)
                lock.truncate()
                lock.write(run_id)
                lock.flush()
                os.fsync(lock.fileno())
