"""Compare a candidate run with a baseline run from their files: the one entry point of the CLI's
``compare`` and the plugin's ``--rollouts-baseline``, so both pair, test and gate alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.scoring.comparison_lines import comparison_line, comparison_lines
from pytest_rollouts.scoring.intervals import UNIT_RANGE, RewardRange
from pytest_rollouts.scoring.multiplicity import NAMES, NONE, adjust
from pytest_rollouts.scoring.paired import NO_TASK_SCORED_IN_BOTH, Comparison, TaskRewards, compare
from pytest_rollouts.scoring.pairing import Pairing, pair_runs, read_run
from pytest_rollouts.scoring.regression import RegressionGate
from pytest_rollouts.scoring.sequential import SequentialResult, sequential


@datatype(frozen=True)
class RunComparison:
    baseline: Path
    candidate: Path
    pairing: Pairing
    comparisons: tuple[Comparison, ...]
    reward_range: RewardRange
    gate: RegressionGate | None
    # How the groups' p-values are adjusted for their number (``multiplicity.py``): none, holm, bh.
    correction: str = NONE
    # Each group's anytime-valid confidence sequence (``--sequential``), else empty.
    sequences: tuple[SequentialResult | None, ...] = ()

    @property
    def adjusted(self) -> list[float | None]:
        """Each group's test p-value adjusted over the groups (None without a correction or a test)."""
        if self.correction == NONE:
            return [None] * len(self.comparisons)
        return adjust([None if c.test is None else c.test.p_value for c in self.comparisons], self.correction)

    def _adjusted_words(self, index: int) -> str:
        """``; Holm-adjusted over 3 groups p=0.0900`` for one group's line, or "" without a correction."""
        p = self.adjusted[index]
        if p is None:
            return ""
        family = sum(1 for c in self.comparisons if c.test is not None)
        return f"; {NAMES[self.correction]}-adjusted over {family} group{'s' if family != 1 else ''} p={p:.4f}"

    def _sequence_words(self, index: int, before: str = "") -> str:
        """What the group's confidence sequence says, or "" without one: its interval after the
        last task, and the task after which the difference (and the gate) was clear."""
        if not self.sequences:
            return ""
        found = self.sequences[index]
        if found is None:
            why = "rewards outside the reward range" if self.comparisons[index].outside else NO_TASK_SCORED_IN_BOTH
            return f"{before}no confidence sequence ({why})"
        words = f"anytime-valid 95% CS [{found.low:+.4f}, {found.high:+.4f}] over {found.tasks} tasks"
        if found.clear_at is None:
            words += f"; no difference clear after {found.tasks} tasks"
        else:
            words += f"; difference clear after {found.clear_at} of {found.tasks} tasks (a sequential run stops there)"
        if self.gate is not None:
            gate_clear = found.gate_clear_at
            words += (
                f"; no regression beyond {self.gate.max_regression:g} clear after {gate_clear} tasks"
                if gate_clear is not None
                else f"; a regression beyond {self.gate.max_regression:g} not ruled out sequentially"
            )
        return before + words

    def lines(self) -> list[str]:
        """``compare``'s report: at most three lines per group, then the run's lines."""
        out = [self._heading()]
        for index, comparison in enumerate(self.comparisons):
            lines = comparison_lines(comparison, self.reward_range)
            lines[0] += self._adjusted_words(index)
            out.extend(lines)
            if self.sequences:
                out.append(f"{comparison.group}: {self._sequence_words(index)}")
        return out + self.run_lines()

    def group_line(self, group: str) -> str | None:
        """A run summary's one line for this group, beside its own score; None when no task of it was paired."""
        return next(
            (
                comparison_line(c, self.reward_range, self._adjusted_words(i)) + self._sequence_words(i, "; ")
                for i, c in enumerate(self.comparisons)
                if c.group == group
            ),
            None,
        )

    def run_lines(self, heading: bool = False) -> list[str]:
        """What holds for every group: (with ``heading``) what was compared with what, the partial
        pairing's note, and the one line of what the gate compared."""
        out = [self._heading()] if heading else []
        if self.pairing.note:
            out.append(self.pairing.note)
        if self.gate is not None:
            out.append(self.gate.measures(self.comparisons, self.correction))
        return out

    def _heading(self) -> str:
        return f"compared {self.candidate} (candidate) with {self.baseline} (baseline), paired by {self.pairing.how}"

    @property
    def failure(self) -> str | None:
        """The gate's ``EVAL FAILED`` line, or None (also without a gate)."""
        return None if self.gate is None else self.gate.failure(self.comparisons, self.correction)

    def group_entry(self, group: str) -> dict[str, Any] | None:
        """One group's comparison with the run-level facts, for its metrics entry; None when the
        group had no task paired."""
        whole = self.as_dict()
        entry = next((g for g in whole["groups"] if g["group"] == group), None)
        if entry is None:
            return None
        return {**{k: v for k, v in whole.items() if k not in ("groups", "candidate")}, **entry}

    def as_dict(self) -> dict[str, Any]:
        """The comparison under the keys docs/statistics.md documents."""
        return {
            "baseline": str(self.baseline),
            "candidate": str(self.candidate),
            "paired_by": self.pairing.how,
            "num_tasks_left_out": self.pairing.left_out,
            "reward_range": [self.reward_range.low, self.reward_range.high],
            "max_regression": None if self.gate is None else self.gate.max_regression,
            "gate_scored_only": None if self.gate is None else self.gate.scored_only,
            "correction": self.correction,
            "groups": self._group_dicts(),
        }

    def _group_dicts(self) -> list[dict[str, Any]]:
        """Each group's keys, with its adjusted p-values when a correction is asked: the test's, and
        the gate's one-sided p-value of a regression beyond DELTA, raw and adjusted."""
        entries = [c.as_dict() for c in self.comparisons]
        for entry, found in zip(entries, self.sequences, strict=False):
            if found is not None:
                entry["sequential"] = found.as_dict()
        if self.correction == NONE:
            return entries
        gate_adjusted = None if self.gate is None else self.gate.adjusted(self.comparisons, self.correction)
        for index, (entry, adjusted) in enumerate(zip(entries, self.adjusted, strict=True)):
            entry["p_value_adjusted"] = adjusted
            if self.gate is not None and gate_adjusted is not None:
                entry["regression_p_value"] = self.gate.p_value(self.comparisons[index])
                entry["regression_p_value_adjusted"] = gate_adjusted[index]
        return entries


def compare_runs(
    baseline: Path,
    candidate: Path,
    *,
    allow_partial: bool = False,
    reward_range: RewardRange = UNIT_RANGE,
    gate: RegressionGate | None = None,
    agents: Mapping[str, str] | None = None,
    correction: str = NONE,
    sequential_test: bool = False,
) -> RunComparison:
    """Read, pair and compare; ``PairingError`` when the runs cannot be paired, ``JsonlError`` for a bad file.
    ``agents``: baseline agents paired with candidate agents of other names; ``correction``: how the
    groups' p-values are adjusted for their number; ``sequential_test``: add each group's
    anytime-valid confidence sequence over its tasks in order."""
    pairing = pair_runs(read_run(baseline), read_run(candidate), allow_partial, agents)
    comparisons = tuple(compare(group, pairs, reward_range) for group, pairs in pairing.groups.items())
    sequences: tuple[SequentialResult | None, ...] = ()
    if sequential_test:
        width = reward_range.high - reward_range.low
        margin = None if gate is None else gate.max_regression
        sequences = tuple(
            # A reward outside the range breaks the bound the sequence rests on: none, as no Manski bounds.
            sequential(diffs, width, margin) if (diffs := _differences(pairs)) and c.outside is None else None
            for pairs, c in zip(pairing.groups.values(), comparisons, strict=True)
        )
    return RunComparison(baseline, candidate, pairing, comparisons, reward_range, gate, correction, sequences)


def _differences(pairs: Sequence[tuple[TaskRewards, TaskRewards]]) -> list[float]:
    """Each task's candidate mean less its baseline mean, in task order, over the tasks both runs
    scored (the paired interval's d_i)."""
    return [c - b for base, cand in pairs if (b := base.mean) is not None and (c := cand.mean) is not None]
