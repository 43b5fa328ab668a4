"""What the score covers: every materialized rollout is scored, counted as zero, or reported missing.

Pure bookkeeping over keys, no files. The policies follow NeMo Gym exactly: they change
the metric input, never the artifacts; the latest attempt of a key decides; a key that
also succeeded is never counted as zero.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import field, replace

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.records import NO_REWARD
from pytest_rollouts.rows.schema import CANCELLED

Key = tuple[int, int]
NO_ROW = "no row"
MASKED = "mask_sample"
# NO_REWARD: a result row whose reply carried no numeric reward. It is kept and enters the metric
# input (its tokens are real), but it is not a score, so the mean and pass@k leave it out.
# Results the score misses that are kept in the output file, not in the failures sidecar.
IN_OUTPUT = frozenset({MASKED, NO_REWARD})
# What the output file said of a materialized rollout, as bits of one byte (0: it holds no row of it).
ROW_READ, ROW_MASKED, ROW_UNREWARDED = 1, 2, 4
# Reasons a rollout is missing that leave nothing in the failures sidecar.
OUTSIDE_SIDECAR = frozenset({NO_ROW, CANCELLED}) | IN_OUTPUT


@datatype
class Outcomes:
    """What became of a set of rollouts, counted alike for what this session's items reported and for
    the whole run on disk, so the two lines compare and agree whenever they cover the same rollouts."""

    total: int
    # Results with a numeric reward: the scores (policies' zeros are not among them).
    scored: int
    masked: int
    no_reward: int
    # Failure classes, ``cancelled`` included.
    failed: Mapping[str, int]
    no_row: int = 0
    # Failed or missing rollouts the policies score as zero (``--rollouts-count-as-zero``): in the
    # mean as the metrics file's ``coverage.scored`` has them, and still counted among the failed.
    zeros: int = 0

    def without_rows_missing(self) -> Outcomes:
        """These outcomes less the rollouts that left no row: what a session that reported every row
        written (and was stopped before the rest) saw."""
        return replace(self, total=self.total - self.no_row, no_row=0)

    def line(self, session: bool = False) -> str:
        """``N of M rollouts scored; ...`` for the whole run, ``M rollouts reported, N scored; ...`` for
        a session (which may not have reported them all)."""
        scored = self.scored + self.zeros
        head = (
            f"{self.total} rollouts reported, {scored} scored"
            if session
            else f"{scored} of {self.total} rollouts scored"
        )
        if self.zeros:
            head += f", {self.zeros} of them failed and scored as zero"
        failed = ", ".join(f"{name} {count}" for name, count in sorted(self.failed.items()) if count)
        parts = [
            head,
            f"{MASKED} {self.masked}" if self.masked else "",
            f"{NO_REWARD} {self.no_reward}" if self.no_reward else "",
            f"failed: {failed}" if failed else "",
            f"{NO_ROW} {self.no_row}" if self.no_row else "",
        ]
        return "; ".join(part for part in parts if part)


@datatype
class ScoringPolicy:
    """Which failed or missing rollouts score as zero rather than leave the mean
    (``--rollouts-count-as-zero``, ``--rollouts-count-missing-as-zero``)."""

    count_as_zero: frozenset[str] = frozenset()
    count_missing_as_zero: bool = False


@datatype
class Coverage:
    """The numbers behind the coverage report, for one group or the whole run."""

    expected: int = 0
    completed: int = 0
    masked: int = 0
    unrewarded: int = 0
    counted_as_zero: int = 0
    imputed_zero: int = 0
    missing_by_class: Counter[str] = field(default_factory=Counter)
    # The latest failure class of every rollout that never succeeded, those counted as zero and
    # ``cancelled`` included: what failed, whatever the policies made of it.
    failed_by_class: Counter[str] = field(default_factory=Counter)

    @property
    def rewarded(self) -> int:
        """Results with a numeric reward, neither masked nor without one."""
        return self.completed - self.masked - self.unrewarded

    @property
    def failed(self) -> int:
        """Rollouts that failed (any class) or replied without a reward: what --rollouts-max-failures counts."""
        return sum(self.failed_by_class.values()) + self.unrewarded

    def outcomes(self) -> Outcomes:
        return Outcomes(
            self.expected,
            self.rewarded,
            self.masked,
            self.unrewarded,
            self.failed_by_class,
            self.expected - self.completed - sum(self.failed_by_class.values()),
            self.counted_as_zero + self.imputed_zero,
        )

    @property
    def scored(self) -> int:
        """Rollouts the mean reward covers: real results (unmasked, with a reward) plus zeros the
        policies added."""
        return self.rewarded + self.counted_as_zero + self.imputed_zero

    @property
    def missing(self) -> int:
        return self.expected - self.scored

    def __iadd__(self, other: Coverage) -> Coverage:
        self.expected += other.expected
        self.completed += other.completed
        self.masked += other.masked
        self.unrewarded += other.unrewarded
        self.counted_as_zero += other.counted_as_zero
        self.imputed_zero += other.imputed_zero
        self.missing_by_class.update(other.missing_by_class)
        self.failed_by_class.update(other.failed_by_class)
        return self

    def as_dict(self) -> dict[str, object]:
        return {
            "expected": self.expected,
            "completed": self.completed,
            "scored": self.scored,
            "missing": self.missing,
            "masked": self.masked,
            "unrewarded": self.unrewarded,
            "counted_as_zero": self.counted_as_zero,
            "imputed_zero": self.imputed_zero,
            "missing_by_class": dict(sorted(self.missing_by_class.items())),
            "failed": self.failed,
            # Adds up to ``failed``: a result without a reward is a failed rollout too.
            "failed_by_class": dict(
                sorted({**self.failed_by_class, **({NO_REWARD: self.unrewarded} if self.unrewarded else {})}.items())
            ),
        }

    def pointer(self, sidecar: str, out: str) -> str:
        """Where the missing rollouts' rows are: failures in the sidecar (not a drained rollout's,
        nor one with no row), masked results and those without a reward in the output."""
        written = any(name not in OUTSIDE_SIDECAR for name in self.missing_by_class)
        kept = " and ".join(name for name in sorted(self.missing_by_class) if name in IN_OUTPUT)
        where = [f"see {sidecar}" if written else "", f"{kept} kept in {out}" if kept else ""]
        return "".join(f"; {part}" for part in where if part)

    def report_lines(
        self,
        sidecar: str,
        count_as_zero_option: str = "--rollouts-count-as-zero",
        out: str = "the output",
        scored: bool = True,
    ) -> list[str]:
        """NeMo Gym's wording, printed whenever the score does not cover the whole input.
        ``scored``: false for a run stopped before its metrics, which has no mean to cover anything."""
        if self.missing == 0 and self.imputed_zero == 0 and self.counted_as_zero == 0:
            return []
        lines = []
        if self.missing:
            counts = ", ".join(f"{name} {count}" for name, count in sorted(self.missing_by_class.items()))
            lines.append(
                f"Rollouts missing from the score: {self.missing} of {self.expected} materialized "
                f"({counts} routed this run{self.pointer(sidecar, out)})"
            )
        if not scored:
            return lines
        lines.append(f"Metrics cover: {self.scored} of {self.expected} rollouts")
        if self.counted_as_zero:
            lines.append(
                f"Scored as zero by {count_as_zero_option}: {self.counted_as_zero} of {self.expected} rollouts"
            )
        if self.imputed_zero:
            lines.append(f"Scored as zero because they left no row: {self.imputed_zero} of {self.expected} rollouts")
        return lines


@datatype
class Accounting:
    """Where every expected rollout of a group went: its coverage, and the keys scored as zero, counted
    (their failure class is asked to) or imputed (they left no row)."""

    coverage: Coverage
    counted: list[Key]
    imputed: list[Key]


def account(
    states: Iterable[tuple[Key, int]],
    latest_failure_class: Mapping[Key, str],
    policy: ScoringPolicy,
    drained: frozenset[Key] = frozenset(),
) -> Accounting:
    """Sort every expected key into scored, counted as zero, imputed as zero, or missing (by class).

    ``states``: each expected key with what the output file said of it (``ROW_*`` bits).
    ``drained``: keys this session's dispatch budget did not start. They leave no row, so
    only the session can tell them (class ``cancelled``) from rows that went missing.
    """
    coverage = Coverage()
    counted: list[Key] = []
    imputed: list[Key] = []
    for key, state in states:
        coverage.expected += 1
        if state:
            coverage.completed += 1
            if state & ROW_MASKED:
                coverage.masked += 1
                coverage.missing_by_class[MASKED] += 1
            elif state & ROW_UNREWARDED:
                coverage.unrewarded += 1
                coverage.missing_by_class[NO_REWARD] += 1
            continue
        failure_class = latest_failure_class.get(key)
        if failure_class is not None:
            coverage.failed_by_class[failure_class] += 1
            if failure_class in policy.count_as_zero:
                counted.append(key)
            else:
                coverage.missing_by_class[failure_class] += 1
            continue
        if key in drained:
            coverage.failed_by_class[CANCELLED] += 1
        if policy.count_missing_as_zero:
            imputed.append(key)
        else:
            coverage.missing_by_class[CANCELLED if key in drained else NO_ROW] += 1
    coverage.counted_as_zero = len(counted)
    coverage.imputed_zero = len(imputed)
    return Accounting(coverage, counted, imputed)
