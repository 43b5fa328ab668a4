"""What the score covers: every materialized rollout is scored, counted as zero, or reported missing.

Pure bookkeeping over keys, no files. The policies follow NeMo Gym exactly: they change
the metric input, never the artifacts; the latest attempt of a key decides; a key that
also succeeded is never counted as zero.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pytest_rollouts.rows.schema import CANCELLED

Key = tuple[int, int]
NO_ROW = "no row"
MASKED = "mask_sample"
# A result row whose reply carried no numeric reward: it is kept and enters the metric input
# (its tokens are real), but it is not a score, so the mean and pass@k leave it out.
NO_REWARD = "no reward"
# Reasons a rollout is missing that leave nothing in the failures sidecar.
OUTSIDE_SIDECAR = frozenset({NO_ROW, MASKED, NO_REWARD, CANCELLED})


@dataclass(frozen=True)
class ScoringPolicy:
    count_as_zero: frozenset[str] = frozenset()
    count_missing_as_zero: bool = False


@dataclass
class Coverage:
    """The numbers behind the coverage report, for one group or the whole run."""

    expected: int = 0
    completed: int = 0
    masked: int = 0
    unrewarded: int = 0
    counted_as_zero: int = 0
    imputed_zero: int = 0
    missing_by_class: Counter[str] = field(default_factory=Counter)

    @property
    def scored(self) -> int:
        """Rollouts the mean reward covers: real results (unmasked, with a reward) plus zeros the
        policies added."""
        return self.completed - self.masked - self.unrewarded + self.counted_as_zero + self.imputed_zero

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
        }

    def pointer(self, sidecar: str) -> str:
        """Where the missing rollouts' failures are written, when some of them are: not a drained
        rollout's, nor one with no row, nor a row without a reward or masked."""
        written = any(name not in OUTSIDE_SIDECAR for name in self.missing_by_class)
        return f"; see {sidecar}" if written else ""

    def report_lines(self, sidecar: str, count_as_zero_option: str = "--rollouts-count-as-zero") -> list[str]:
        """NeMo Gym's wording, printed whenever the score does not cover the whole input."""
        if self.missing == 0 and self.imputed_zero == 0 and self.counted_as_zero == 0:
            return []
        lines = []
        if self.missing:
            counts = ", ".join(f"{name} {count}" for name, count in sorted(self.missing_by_class.items()))
            lines.append(
                f"Rollouts missing from the score: {self.missing} of {self.expected} materialized "
                f"({counts} routed this run{self.pointer(sidecar)})"
            )
        lines.append(f"Metrics cover: {self.scored} of {self.expected} rollouts")
        if self.counted_as_zero:
            lines.append(
                f"Scored as zero by {count_as_zero_option}: {self.counted_as_zero} of {self.expected} rollouts"
            )
        if self.imputed_zero:
            lines.append(f"Scored as zero because they left no row: {self.imputed_zero} of {self.expected} rollouts")
        return lines


@dataclass(frozen=True)
class Accounting:
    coverage: Coverage
    counted: list[Key]
    imputed: list[Key]


def account(
    expected: Iterable[Key],
    completed: set[Key],
    masked: set[Key],
    latest_failure_class: Mapping[Key, str],
    policy: ScoringPolicy,
    drained: frozenset[Key] = frozenset(),
    unrewarded: set[Key] | frozenset[Key] = frozenset(),
) -> Accounting:
    """Sort every expected key into scored, counted as zero, imputed as zero, or missing (by class).

    ``drained``: keys this session's dispatch budget did not start. They leave no row, so
    only the session can tell them (class ``cancelled``) from rows that went missing.
    """
    coverage = Coverage()
    counted: list[Key] = []
    imputed: list[Key] = []
    for key in expected:
        coverage.expected += 1
        if key in completed:
            coverage.completed += 1
            if key in masked:
                coverage.masked += 1
                coverage.missing_by_class[MASKED] += 1
            elif key in unrewarded:
                coverage.unrewarded += 1
                coverage.missing_by_class[NO_REWARD] += 1
            continue
        failure_class = latest_failure_class.get(key)
        if failure_class is not None:
            if failure_class in policy.count_as_zero:
                counted.append(key)
            else:
                coverage.missing_by_class[failure_class] += 1
        elif policy.count_missing_as_zero:
            imputed.append(key)
        else:
            coverage.missing_by_class[CANCELLED if key in drained else NO_ROW] += 1
    coverage.counted_as_zero = len(counted)
    coverage.imputed_zero = len(imputed)
    return Accounting(coverage, counted, imputed)
