"""Where a run's artifacts live, all derived from the output path ``<stem>.jsonl``."""

from __future__ import annotations

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
