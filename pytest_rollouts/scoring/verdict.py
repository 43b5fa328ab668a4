"""A run's verdict: the exit status its end asks for, and the lines that say why.

The rules are the same however the run was started (a pytest session, the Python API, the
aggregate command), so a CI script reads every run's status alike. The codes are pytest's where
they mean the same (0 passed, 1 failed, 2 interrupted, 5 nothing collected) and the gate's
beyond them (6 incomplete, 7 below the threshold, 9 too many failures or nothing scored): see
docs/scoring.md, "Exit codes".

Everything here is plain data in, plain data out: the caller gathers the facts (pytest's, for the
plugin) and scores the run; this module only decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.schema import CANCELLED
from pytest_rollouts.scoring.gate import Gate

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import RunScore

OK = 0
FAILED = 1
INTERRUPTED = 2
NO_TESTS_COLLECTED = 5
USAGE = 4  # a baseline that cannot be compared: the run was asked for what it cannot do


@datatype
class RunEnd:
    """How the session around a run ended, as plain facts.

    A run without pytest around it gives ``status`` (``OK``, or ``INTERRUPTED`` when it was
    stopped) and ``dispatch_failure``, and leaves ``began`` True. The other fields are a pytest
    session's; their defaults say that nothing of the kind happened.
    """

    # The session's own exit status, before the run's rules (pytest's, for the plugin).
    status: int = OK
    # The run started (sent or reported a rollout): a stop after that says what it covered.
    # It counts only with status INTERRUPTED.
    began: bool = True
    # Why dispatch stopped before its end (its last rows may be lost), or "".
    dispatch_failure: str = ""
    # Items reported failed, ordinary tests included (pytest's ``testsfailed``).
    failed_items: int = 0
    # Of them, rollout items failed only by their rollouts' failure classes.
    rollout_failed_items: int = 0
    # A cap on failures (-x, --maxfail) stopped the session: rollouts were left unsent.
    cut_short: bool = False
    # A failed dispatch stopped the session (pytest-xdist ends such a session as interrupted).
    stopped_by_dispatch: bool = False
    # The run's shard holds none of the dataset's tasks, and its (empty) artifacts are written.
    # It counts only with status NO_TESTS_COLLECTED.
    no_task_here: bool = False

    @property
    def exit_status(self) -> int:
        """The status by the run's rules, before its score is judged.

        Failure classes alone leave it 0: a failed rollout is recorded and scored, not a broken
        test. A run cut short, or whose dispatch stopped, is not whole: 1, also where
        pytest-xdist says 2 (one process says 1 for the same run). A shard with nothing to run
        is done: 0, not pytest's "no tests collected".
        """
        status = self.status
        if status == INTERRUPTED and (self.cut_short or self.stopped_by_dispatch):
            status = FAILED
        only_rollouts = self.rollout_failed_items > 0 and self.failed_items == self.rollout_failed_items
        if status == FAILED and only_rollouts and not self.cut_short:
            status = OK
        if status == OK and self.dispatch_failure:
            status = FAILED
        if status == NO_TESTS_COLLECTED and self.no_task_here:
            status = OK
        return status

    @property
    def interrupted(self) -> bool:
        """The user stopped the run after it began: it is not scored, but says what it covered."""
        return self.exit_status == INTERRUPTED and self.began

    @property
    def scored(self) -> bool:
        """Whether the run is scored: it ran its course (passed or failed), or it was
        ``interrupted`` (then for its coverage only, which ``judge_run`` does not gate)."""
        return self.exit_status in (OK, FAILED) or self.interrupted


@datatype
class Verdict:
    """What a run's end means."""

    # The exit status the run asks for.
    exit_code: int
    # Why the run did not pass, one line each, in the order they happened: dispatch stopped,
    # the metrics file could not be written, the gate's message. Shown in red by the plugin.
    problems: tuple[str, ...] = ()
    # For an interrupted run: what it leaves to do, and how; else "".
    stopped: str = ""
    # What the asked gates compared (the mean, the failures), printed whether they pass or not.
    measures: tuple[str, ...] = ()


# What a run not scored is judged by: no gate applies to it.
NO_GATE = Gate()


def judge_run(score: RunScore | None, end: RunEnd, gate: Gate = NO_GATE) -> Verdict:
    """The verdict on a run that ended as ``end`` says, with ``score`` its score (None when it was
    not scored: its status alone decides).

    Metrics that could not be written fail a run that otherwise passed (1); the gate's verdict
    is the more specific one (6, 7, 9), so it replaces any other status. An interrupted run is not
    gated: it keeps its status (2) and says what is left to do.

    The score's comparison with ``--rollouts-baseline`` adds its lines to the measures, and its
    regression gate exits 10 when no other gate failed (its EVAL FAILED line is there either way);
    one that could not be made exits 4.
    """
    status = end.exit_status
    problems = [end.dispatch_failure] if end.dispatch_failure else []
    if end.interrupted:
        return Verdict(status, tuple(problems), _resume_line(score))
    if score is None:
        return Verdict(status, tuple(problems))
    if score.metrics_error:
        problems.append(score.metrics_error)
        if status == OK:
            status = FAILED  # a run whose metrics are lost is no success
    # --rollouts-gate-on lower-bound: the mean with every failed or missing rollout at the floor.
    if gate.gate_on == "mean":
        mean = score.mean_reward
    else:  # imported here: the reporter imports this module in every pytest session, datasets or not
        from pytest_rollouts.scoring.run_statistics import run_lower_bound

        mean = run_lower_bound(score)
    failure = gate.check(score.coverage, mean, passing=status == OK)
    if failure is not None:
        problems.append(failure.message)
        status = failure.exit_code
    measures = gate.measures(score.coverage, mean)
    baseline = score.baseline
    if isinstance(baseline, str):
        problems.append(baseline)
        status = status if failure is not None else USAGE
    elif baseline is not None:
        measures += baseline.run_lines(heading=True)
        if baseline.failure is not None:  # said even when another gate's code stands
            # Here, not at the top: a run without a baseline never loads the comparison's modules.
            from pytest_rollouts.scoring.regression import EXIT_REGRESSION

            problems.append(baseline.failure)
            status = status if failure is not None else EXIT_REGRESSION
    return Verdict(status, tuple(problems), measures=tuple(measures))


def _resume_line(score: RunScore | None) -> str:
    """What a run the user stopped leaves to do, and how (``score``: its coverage, when known)."""
    if score is None:
        return "Interrupted: --rollouts-resume goes on with this run"
    coverage = score.coverage
    left = coverage.expected - coverage.completed
    if not left:
        return "Interrupted with every materialized rollout written: --rollouts-resume scores the run (sending nothing)"
    # A drained rollout (``cancelled``) left no row: it was never sent.
    failed = sum(n for name, n in coverage.failed_by_class.items() if name != CANCELLED)
    if not failed:
        return (
            f"Interrupted with {left} of {coverage.expected} materialized rollouts without a row: "
            "--rollouts-resume runs them, up to the attempt cap (none with a row is sent again)"
        )
    return (
        f"Interrupted with {left} of {coverage.expected} materialized rollouts without a result "
        f"({left - failed} with no row, {failed} failed): --rollouts-resume runs them, up to the attempt cap "
        "(none with a result is sent again)"
    )
