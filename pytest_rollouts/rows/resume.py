"""Which materialized rollouts run again on resume: pure decisions over rows already on disk.

NeMo Gym's rules: a key with a row in ``<stem>.jsonl`` is done; a key whose latest
sidecar row is terminal is not retried (``retry_terminal_timeouts`` reopens
``timeout_exceeded``, never ``skipped``); a key with ``max_attempts`` sidecar rows is
capped. Everything else runs again, its attempt index counting the earlier failures.

A sidecar row is one run's attempt: the HTTP retries within that run are summarised in it
(``_ng_earlier_tries``), never rows of their own. So the cap counts runs that tried a rollout,
and an outage that outlasted one run's retries costs one attempt, not all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from enum import Enum
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.records import is_masked, marked_terminal, reward_of
from pytest_rollouts.rows.schema import (
    ALWAYS_TERMINAL,
    ELAPSED,
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    ROLLOUT_INDEX,
    TASK_INDEX,
)

Key = tuple[int, int]
RETRYABLE_WITH_OPT_IN = "timeout_exceeded"


def key_of(row: dict[str, Any]) -> Key:
    return int(row[TASK_INDEX]), int(row[ROLLOUT_INDEX])


@datatype(slots=True)
class KeyHistory:
    """What earlier runs left for one (task, rollout)."""

    succeeded: bool = False
    # A result's reward (None when masked or without one), and its ``mask_sample``.
    reward: float | None = None
    masked: bool = False
    failures: int = 0  # sidecar rows: runs whose attempt failed
    latest_class: str | None = None
    latest_terminal: bool = False
    latest_message: str = ""
    longest: float = 0.0


@datatype(slots=True)
class Histories:
    """What the output and failures files hold of each rollout key, for a resume to plan from."""

    by_key: dict[Key, KeyHistory] = field(default_factory=dict)

    def add_output(self, row: dict[str, Any]) -> None:
        history = self._get(row)
        history.succeeded = True
        history.masked = is_masked(row)
        history.reward = None if history.masked else reward_of(row)

    def add_failure(self, row: dict[str, Any]) -> None:
        history = self._get(row)
        history.failures += 1
        history.latest_class = str(row.get(FAILURE_CLASS))
        history.latest_terminal = marked_terminal(row)
        history.latest_message = str(row.get(FAILURE_MESSAGE) or "")

    def _get(self, row: dict[str, Any]) -> KeyHistory:
        key = key_of(row)
        history = self.by_key.get(key)
        if history is None:
            history = self.by_key[key] = KeyHistory()
        elapsed = row.get(ELAPSED)
        if isinstance(elapsed, (int, float)):
            history.longest = max(history.longest, float(elapsed))
        return history

    def task_longest(self) -> dict[int, float]:
        longest: dict[int, float] = {}
        for (task, _), history in self.by_key.items():
            longest[task] = max(longest.get(task, 0.0), history.longest)
        return longest


def histories(outputs: Iterable[dict[str, Any]], failures: Iterable[dict[str, Any]]) -> Histories:
    """Failures must come in file order: the last row of a key is its latest attempt."""
    result = Histories()
    for row in outputs:
        result.add_output(row)
    for row in failures:
        result.add_failure(row)
    return result


class Verdict(Enum):
    DONE = "done"
    TERMINAL = "terminal"
    CAPPED = "capped"
    RUN = "run"


def decide(history: KeyHistory | None, *, max_attempts: int, retry_terminal_timeouts: bool) -> Verdict:
    if history is None:
        return Verdict.RUN
    if history.succeeded:
        return Verdict.DONE
    if history.latest_class is not None and is_terminal(
        history.latest_class, history.latest_terminal, retry_terminal_timeouts
    ):
        return Verdict.TERMINAL
    if history.failures >= max_attempts:
        return Verdict.CAPPED
    return Verdict.RUN


def is_terminal(failure_class: str, stamped_terminal: bool, retry_terminal_timeouts: bool) -> bool:
    if failure_class in ALWAYS_TERMINAL:
        return True
    if retry_terminal_timeouts and failure_class == RETRYABLE_WITH_OPT_IN:
        return False
    return stamped_terminal
