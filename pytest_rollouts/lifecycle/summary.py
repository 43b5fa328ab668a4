"""``RunSummary``: what a finished run concluded, for a door to render and nothing to recompute."""

from __future__ import annotations

from pytest_rollouts.datatype import datatype
from pytest_rollouts.scoring.aggregate import RunScore
from pytest_rollouts.scoring.summary import score_lines
from pytest_rollouts.scoring.verdict import Verdict
from pytest_rollouts.store.artifacts import ArtifactPaths


@datatype(frozen=True)
class RunSummary:
    """A finished run: its score from the files on disk, the verdict of its gates, and what
    publishing it said."""

    score: RunScore
    verdict: Verdict
    paths: ArtifactPaths
    # The classes ``count_as_zero`` named: one neither known nor seen is named in the lines.
    count_as_zero: frozenset[str] = frozenset()
    # Where the report was written, or why it could not be (the run stands either way).
    report: str = ""
    # A line per export: where the run went, or why it did not.
    exports: tuple[str, ...] = ()

    def lines(self, count_option: str = "count_as_zero") -> list[str]:
        """What became of the rollouts, the metrics and coverage, what the gates compared and why
        the run failed, and where the report went; ``count_option`` as the door's user spells it."""
        paths = self.paths
        return [
            self.score.coverage.outcomes().line(),
            *score_lines(
                self.score, str(paths.failures), count_option, out=str(paths.out), count_as_zero=self.count_as_zero
            ),
            *([self.verdict.stopped] if self.verdict.stopped else []),
            *self.verdict.measures,
            *self.verdict.problems,
            *([self.report] if self.report else []),
        ]
