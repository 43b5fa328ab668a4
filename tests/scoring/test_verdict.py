"""A run's verdict from plain facts: the exit status its end asks for, and the lines that say why.

No pytest session here: the rules are the core's (``scoring/verdict.py``), for every way a run starts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.scoring.accounting import Coverage, ScoringPolicy
from pytest_rollouts.scoring.aggregate import GroupScore, RunScore, score_run
from pytest_rollouts.scoring.gate import EXIT_FAIL_UNDER, EXIT_INCOMPLETE, Gate
from pytest_rollouts.scoring.verdict import FAILED, INTERRUPTED, NO_TESTS_COLLECTED, OK, RunEnd, Verdict, judge_run
from pytest_rollouts.store.artifacts import ArtifactPaths

NO_GATE = Gate()


def run_score(mean: float | None, *, expected: int = 4, completed: int = 4, metrics_error: str = "") -> RunScore:
    """One group whose server reported ``mean`` (None: no ``mean/reward``) over what it completed."""
    coverage = Coverage(expected=expected, completed=completed)
    if completed < expected:
        coverage.missing_by_class = Counter({"agent_run_error": expected - completed})
    metrics = {} if mean is None else {"key_metrics": {"mean/reward": mean}}
    return RunScore([GroupScore("a", coverage, metrics, "server")], coverage, metrics_error=metrics_error)


def scored_files(tmp_path: Path, rewards: list[float | None]) -> RunScore:
    """A run of one rollout per task scored from real files: a reward each, None for no row."""
    paths = ArtifactPaths(tmp_path / "r.jsonl")
    stamps = [{"agent_ref": {"name": "a"}, "_ng_task_index": t, "_ng_rollout_index": 0} for t in range(len(rewards))]
    paths.materialized.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in stamps))
    rows = [{**s, "reward": r} for s, r in zip(stamps, rewards, strict=True) if r is not None]
    paths.out.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    paths.failures.write_bytes(b"")
    return score_run(paths, ScoringPolicy(), agent_url=lambda name: None, write_metrics=True, timeout=5.0)


# -- the session's own status, before the score ---------------------------------------------


@pytest.mark.parametrize(
    ("end", "status"),
    [
        (RunEnd(), OK),
        # Failure classes alone leave the run passing; an ordinary test failing among them does not.
        (RunEnd(status=FAILED, failed_items=3, rollout_failed_items=3), OK),
        (RunEnd(status=FAILED, failed_items=4, rollout_failed_items=3), FAILED),
        (RunEnd(status=FAILED, failed_items=2), FAILED),
        # -x stopped the run: rollouts were left unsent, so it failed, whatever stopped it.
        (RunEnd(status=FAILED, failed_items=1, rollout_failed_items=1, cut_short=True), FAILED),
        # pytest-xdist says 2 for a run -x or a failed dispatch stopped; one process says 1.
        (RunEnd(status=INTERRUPTED, failed_items=1, rollout_failed_items=1, cut_short=True), FAILED),
        (RunEnd(status=INTERRUPTED, stopped_by_dispatch=True, dispatch_failure="dispatch stopped: x"), FAILED),
        (RunEnd(status=INTERRUPTED), INTERRUPTED),
        # Dispatch stopped before its end: rows may be lost, so the run is not whole.
        (RunEnd(dispatch_failure="dispatch stopped: disk full"), FAILED),
        (RunEnd(status=FAILED, failed_items=2, rollout_failed_items=2, dispatch_failure="x"), FAILED),
        # A shard no task falls to is done; a session that collected nothing else is pytest's 5.
        (RunEnd(status=NO_TESTS_COLLECTED, no_task_here=True), OK),
        (RunEnd(status=NO_TESTS_COLLECTED), NO_TESTS_COLLECTED),
        (RunEnd(status=4, dispatch_failure="x"), 4),
    ],
)
def test_the_session_status_by_the_runs_rules(end: RunEnd, status: int) -> None:
    assert end.exit_status == status
    assert judge_run(None, end, NO_GATE).exit_code == status


def test_a_run_is_scored_when_it_ran_its_course_or_was_stopped_after_it_began() -> None:
    assert RunEnd().scored and RunEnd(status=FAILED).scored
    assert RunEnd(status=INTERRUPTED).interrupted and RunEnd(status=INTERRUPTED).scored
    never_began = RunEnd(status=INTERRUPTED, began=False)
    assert not never_began.interrupted and not never_began.scored
    assert not RunEnd(status=3).scored and not RunEnd(status=NO_TESTS_COLLECTED).scored
    # Cut short and reported as interrupted by xdist: a failed run, scored and gated as one.
    cut = RunEnd(status=INTERRUPTED, cut_short=True)
    assert cut.scored and not cut.interrupted


# -- the score's verdict ---------------------------------------------------------------------


def test_a_whole_run_above_the_threshold_passes() -> None:
    verdict = judge_run(run_score(0.75), RunEnd(), Gate(require_complete=True, fail_under=0.5, out="o.jsonl"))
    assert verdict == Verdict(OK, measures=("--rollouts-fail-under 0.5: mean reward 0.7500 over 4 rollouts",))


def test_a_mean_below_the_threshold_fails_with_7() -> None:
    verdict = judge_run(run_score(0.65), RunEnd(), Gate(fail_under=0.9))
    assert verdict == Verdict(
        EXIT_FAIL_UNDER,
        ("EVAL FAILED: mean reward 0.6500 is below --rollouts-fail-under 0.9.",),
        measures=("--rollouts-fail-under 0.9: mean reward 0.6500 over 4 rollouts",),
    )
    assert judge_run(run_score(0.9), RunEnd(), Gate(fail_under=0.9)).exit_code == OK, "the threshold itself passes"


def test_no_mean_to_compare_fails_the_threshold() -> None:
    gate = Gate(fail_under=0.5, fail_under_option="--fail-under")
    verdict = judge_run(run_score(None), RunEnd(), gate)
    assert verdict.exit_code == EXIT_FAIL_UNDER
    assert verdict.problems == ("EVAL FAILED: no mean/reward in the metrics to compare with --fail-under 0.5.",)
    assert judge_run(run_score(None), RunEnd(), NO_GATE) == Verdict(OK), "without a threshold, no mean is no failure"


def test_an_incomplete_run_fails_with_6_before_any_threshold() -> None:
    score = run_score(0.1, completed=3)
    verdict = judge_run(score, RunEnd(), Gate(require_complete=True, fail_under=0.9, out="/o/r.jsonl"))
    assert verdict.exit_code == EXIT_INCOMPLETE
    assert verdict.problems == ("EVAL FAILED: 3/4 samples completed. Partial artifacts retained at /o/r.jsonl.",)
    assert judge_run(score, RunEnd(), NO_GATE).exit_code == OK, "missing rollouts alone do not fail a run"


def test_lost_metrics_fail_a_passing_run_and_the_gate_has_the_last_word() -> None:
    lost = "cannot write out/r_aggregate_metrics.json: No space left on device"
    assert judge_run(run_score(0.75, metrics_error=lost), RunEnd(), NO_GATE) == Verdict(FAILED, (lost,))
    verdict = judge_run(run_score(0.5, metrics_error=lost), RunEnd(), Gate(fail_under=0.9))
    assert verdict.exit_code == EXIT_FAIL_UNDER
    assert verdict.problems == (lost, "EVAL FAILED: mean reward 0.5000 is below --rollouts-fail-under 0.9.")


def test_the_gate_replaces_an_ordinary_failure_and_problems_keep_their_order() -> None:
    end = RunEnd(status=FAILED, failed_items=1, dispatch_failure="dispatch stopped: the dispatcher process exited")
    verdict = judge_run(run_score(0.2, completed=2), end, Gate(require_complete=True, out="r.jsonl"))
    assert verdict.exit_code == EXIT_INCOMPLETE
    assert verdict.problems == (
        "dispatch stopped: the dispatcher process exited",
        "EVAL FAILED: 2/4 samples completed. Partial artifacts retained at r.jsonl.",
    )
    assert judge_run(run_score(0.2), end, NO_GATE).exit_code == FAILED, "a failed test keeps its 1"


def test_an_interrupted_run_is_not_gated_and_says_what_is_left() -> None:
    end = RunEnd(status=INTERRUPTED)
    verdict = judge_run(run_score(0.1, completed=1), end, Gate(require_complete=True, fail_under=0.9))
    assert verdict == Verdict(
        INTERRUPTED,
        stopped="Interrupted with 3 of 4 materialized rollouts without a row: --rollouts-resume runs them, "
        "up to the attempt cap (none with a row is sent again)",
    )
    assert judge_run(run_score(0.1), end, NO_GATE).stopped == (
        "Interrupted with every materialized rollout written: --rollouts-resume scores the run (sending nothing)"
    )
    assert judge_run(None, end, NO_GATE).stopped == "Interrupted: --rollouts-resume goes on with this run"
    assert judge_run(None, RunEnd(status=INTERRUPTED, began=False), NO_GATE) == Verdict(INTERRUPTED)


def test_an_interrupted_run_tells_failed_rollouts_from_those_with_no_row() -> None:
    """A failure has a row (in the sidecar): 'without a row' would contradict the coverage lines."""
    score = run_score(0.1, completed=1)
    score.coverage.failed_by_class = Counter({"agent_run_error": 1, "cancelled": 1})
    assert judge_run(score, RunEnd(status=INTERRUPTED), NO_GATE).stopped == (
        "Interrupted with 3 of 4 materialized rollouts without a result (2 with no row, 1 failed): "
        "--rollouts-resume runs them, up to the attempt cap (none with a result is sent again)"
    )


def test_a_run_scored_from_its_files(tmp_path: Path) -> None:
    """The verdict reads the score as score_run makes it from the files on disk."""
    score = scored_files(tmp_path, [1.0, 0.0, 1.0, None])
    settings = Settings.model_validate({"out": str(tmp_path / "r.jsonl"), "fail_under": 0.7, "require_complete": True})
    assert judge_run(score, RunEnd(), Gate.of(settings)).problems == (
        f"EVAL FAILED: 3/4 samples completed. Partial artifacts retained at {tmp_path / 'r.jsonl'}.",
    )
    below = Gate.of(settings.model_copy(update={"require_complete": False}))
    assert judge_run(score, RunEnd(), below) == Verdict(
        EXIT_FAIL_UNDER,
        ("EVAL FAILED: mean reward 0.6667 is below --rollouts-fail-under 0.7.",),
        measures=("--rollouts-fail-under 0.7: mean reward 0.6667 over 3 rollouts",),
    )
    whole = scored_files(tmp_path, [1.0, 0.0, 1.0, 1.0])
    assert judge_run(whole, RunEnd(), Gate.of(settings)).exit_code == OK
