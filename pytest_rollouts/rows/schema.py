"""The ``_ng_*`` fields of NeMo Gym's artifacts, and the rows built from them.

Every module that reads or writes one of these fields imports its name from here, so a
field is spelled once and the artifacts cannot drift from one writer to the next. The
rows the dispatcher stores (a result, a failure, a failure the agent classified) are
built here too, from the same names.

Which keys are whose follows NeMo Gym's ``_is_collector_key``: the ``_ng_*`` keys (and its
observability records) are written by rollout collection itself, so an environment server's
episode ``result`` that uses them is refused. An agent's ``/run`` reply is not checked (NeMo
Gym applies the check to episode results only): the stamps overwrite whatever it echoes, and
its own ``_ng_failure_*`` fields classify a failure it reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

# The two stamps every row of a run's files is keyed by are spelled in the store, which checks each
# row it reads for them; they are named here with the others.
from pytest_rollouts.store.stamps import ROLLOUT_INDEX as ROLLOUT_INDEX
from pytest_rollouts.store.stamps import TASK_INDEX as TASK_INDEX

if TYPE_CHECKING:
    from pytest_rollouts.dispatch.client import Attempt, Failure

# Every field the collector writes but ``elapsed_seconds`` starts so; none is a measurement.
COLLECTOR_PREFIX = "_ng_"
# The stamps: which rollout a row is (TASK_INDEX, ROLLOUT_INDEX, above), and on which attempt (only
# retries carry an index).
ATTEMPT_INDEX = "_ng_attempt_index"
# An episode row's task id as its environment server named it, and the server it ran on.
TASK_ID = "_ng_task_id"
ENVIRONMENT_SERVER = "_ng_environment_server"
# On every row stamped with its environment server: that server's type, its key under
# ``environment_servers:`` in the head server's config, so a reader knows which kind of result it
# holds (NeMo Gym's ``NG_RESULT_TYPE_KEY``). Nothing reads it back; a row sent to an agent has none.
RESULT_TYPE = "_ng_result_type"

# A failure row: why the attempt produced no score.
FAILURE_CLASS = "_ng_failure_class"
FAILURE_TYPE = "_ng_failure_type"
FAILURE_MESSAGE = "_ng_failure_message"
FAILURE_HTTP_STATUS = "_ng_failure_http_status"
FAILURE_RESPONSE_BODY = "_ng_failure_response_body"
TERMINAL = "_ng_failure_terminal"
# The prefix of the failure fields above, for the ones an environment server's failure adds.
FAILURE_PREFIX = "_ng_failure_"
# An agent-classified failure that is written nowhere (resume sends it again).
NO_PERSIST = "_ng_no_persist"
# On the row of a rollout the dispatch budget never started (NeMo Gym's ``_dispatch_drained_result``):
# nothing ran, so nothing is written, and a caller of ``run_examples`` can tell it from a failure.
DISPATCH_DRAINED = "_ng_dispatch_drained"
# On a failure row: the tries of the same attempt before the one the row describes (HTTP retries
# within one run), oldest first. An attempt is one run's dispatch of a rollout, and resume caps
# attempts, so these tries are summarised here rather than written as rows of their own.
EARLIER_TRIES = "_ng_earlier_tries"
# Not ``_ng_`` fields. A row's request parameters (NeMo Gym's ``responses_create_params``), which
# materialization adds the run's to and the seed goes into.
CREATE_PARAMS = "responses_create_params"
# On every row the collector writes: the attempt's wall time.
ELAPSED = "elapsed_seconds"

# The failure classes the collector writes (contracts.md). ``cancelled``: a rollout the dispatch
# budget never started, written nowhere, so resume starts it.
AGENT_RUN_ERROR = "agent_run_error"
AGENT_REQUEST_FAILED = "agent_request_failed"
ENVIRONMENT_SERVER_FAILED = "environment_server_failed"
CANCELLED = "cancelled"
ALWAYS_TERMINAL = frozenset({"skipped"})
# NeMo Gym's ``retry_invalid_judge_responses``: a verifier's result field saying its judge answered
# unparseably. For a suite that opts in, such a result is a failure of this class (never terminal:
# a judge asked again may answer), and a resume moves such results an earlier run stored as scores
# to the sidecar, each marked so a crash mid-move never moves one twice.
INVALID_JUDGE_RESPONSE = "invalid_judge_response"
JUDGE_INVALID = "judge_invalid"
MIGRATED_INVALID_JUDGE = "_ng_migrated_invalid_judge_response"
JUDGE_INVALID_MESSAGE = "the judge's response could not be used (invalid_judge_response: true)"
# Outcome names the collector itself gives (a result without a reward, a masked one, a rollout never
# started): an agent's failure class by one of these would be counted as that outcome in one line and
# as a failure in the next, so it is stored as ``agent_<name>``.
COLLECTOR_OUTCOMES = frozenset({"no_reward", "mask_sample", CANCELLED})


def agent_class(name: str) -> str:
    """An agent's failure class as stored: its own, unless it is one of the collector's outcomes."""
    return f"agent_{name}" if name in COLLECTOR_OUTCOMES else name


# A failure's response body is kept up to this many characters (NeMo Gym's cut).
MAX_BODY_CHARS = 2000

# NeMo Gym's collector writes these observability records too. An agent's ``/run`` reply may bring
# its own (an agent that sends its trajectory owns its turns); an environment server's result may not.
TRAJECTORY = "ng_trajectory"
PERF = "ng_perf"
OBSERVABILITY_KEYS = frozenset({TRAJECTORY, "ng_model_call_capture", PERF})
# ``ng_perf``'s keys, NeMo Gym's ``_build_ng_perf``: reasoning turns and tool calls over every agent
# invocation, the fraction of those turns whose model call was observed, the token sums over the
# observed calls (each only when some call reported it), and the rollout's wall time.
PERF_TURNS = "num_turns"
PERF_TOOL_CALLS = "num_tool_calls"
PERF_COVERAGE = "token_observability_coverage"
# A model agent's calls answered from the response cache and sent to the model (``--rollouts-cache``),
# in its ``ng_perf``, only when the cache is on.
CACHE_HITS = "model_cache_hits"
CACHE_MISSES = "model_cache_misses"
PERF_TOKENS = {  # ng_perf key: the key of a trajectory model call's ``token_stats``
    "prompt_tokens": "prompt_tokens",
    "cached_prompt_tokens": "cached_tokens",
    "completion_tokens": "completion_tokens",
    "reasoning_tokens": "reasoning_tokens",
}
PERF_LATENCY_MS = "total_latency_ms"
# The same token sums under the Responses API's ``usage`` names, which the metrics use for both.
PERF_AS_USAGE = {
    "prompt_tokens": "input_tokens",
    "completion_tokens": "output_tokens",
    "cached_prompt_tokens": "cached_tokens",
}


def is_collector_key(key: str) -> bool:
    """Keys rollout collection writes itself (NeMo Gym's ``_is_collector_key``)."""
    return key.startswith(COLLECTOR_PREFIX) or key in OBSERVABILITY_KEYS


def result_collector_keys(result: Mapping[str, Any]) -> list[str]:
    """The collector's keys an environment server's episode ``result`` uses, sorted (none may be)."""
    return sorted(key for key in result if is_collector_key(key))


def collector_keys_message(keys: Sequence[str]) -> str:
    return f"the reply sets keys only the collector writes: {', '.join(keys)}"


def success_row(reply: dict[str, Any], stamps: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """A result as stored: the reply with our stamps over anything of the same name it echoed (NeMo
    Gym's collector sets them on the result the same way)."""
    return {**reply, **stamps, ELAPSED: round(elapsed, 6)}


def failure_row(failure: Failure, stamps: dict[str, Any], elapsed: float, earlier: Sequence[Attempt]) -> dict[str, Any]:
    return {
        **stamps,
        FAILURE_CLASS: failure.failure_class,
        FAILURE_TYPE: failure.type,
        FAILURE_MESSAGE: failure.message,
        FAILURE_HTTP_STATUS: failure.http_status,
        FAILURE_RESPONSE_BODY: failure.body,
        TERMINAL: False,
        ELAPSED: round(elapsed, 6),
        EARLIER_TRIES: earlier_tries(earlier),
    }


def drained_row(stamps: dict[str, Any], why: str) -> dict[str, Any]:
    """A rollout the dispatch budget never started: a ``cancelled`` row marked written nowhere, so
    resume starts it next time (``persisted`` is false) and a caller holding it sees why."""
    return {
        **stamps,
        FAILURE_CLASS: CANCELLED,
        FAILURE_TYPE: "DispatchDrained",
        FAILURE_MESSAGE: why,
        FAILURE_HTTP_STATUS: None,
        FAILURE_RESPONSE_BODY: None,
        TERMINAL: False,
        ELAPSED: 0.0,
        DISPATCH_DRAINED: True,
        NO_PERSIST: True,
    }


def persisted(row: Mapping[str, Any]) -> bool:
    """Whether a failure row is written to the sidecar: not when marked ``_ng_no_persist`` (by the agent,
    or as a drained rollout), which leaves the rollout to the next resume."""
    return not row.get(NO_PERSIST)


def agent_failure_row(
    reply: dict[str, Any], stamps: dict[str, Any], elapsed: float, http_status: int | None, earlier: Sequence[Attempt]
) -> dict[str, Any]:
    """A reply the agent itself classified: stored as returned, with our stamps and defaults.

    Defaults, not overrides: the failure's own type, message, status and body, when the agent (or
    an environment server's failure, made a row by ``episodes.py``) gives them, are kept. A
    ``reward`` it sent is kept: counted (``--rollouts-count-as-zero``), the failure enters the
    metrics at that reward, NeMo Gym's rule; only one without a reward is a zero.
    """
    row = {**reply, **stamps, ELAPSED: round(elapsed, 6), EARLIER_TRIES: earlier_tries(earlier)}
    row[FAILURE_CLASS] = agent_class(reply[FAILURE_CLASS])
    row.setdefault(FAILURE_TYPE, "AgentReported")
    row.setdefault(FAILURE_MESSAGE, str(reply.get("failure_reason") or ""))
    row.setdefault(FAILURE_HTTP_STATUS, http_status)
    row.setdefault(FAILURE_RESPONSE_BODY, None)
    # ``skipped`` is terminal whatever the row says (``resume.is_terminal``); a flag the agent gave is
    # kept as it gave it, and one it did not give is written as the class means it.
    row.setdefault(TERMINAL, reply[FAILURE_CLASS] in ALWAYS_TERMINAL)
    return row


def judged_invalid(row: Mapping[str, Any]) -> bool:
    """A result whose verifier says its judge's response was invalid (only a real ``true``)."""
    return row.get(INVALID_JUDGE_RESPONSE) is True


def as_judge_invalid(reply: dict[str, Any]) -> dict[str, Any]:
    """A judged-invalid result as the agent's own ``judge_invalid`` failure, for ``agent_failure_row``."""
    return {
        **reply,
        FAILURE_CLASS: JUDGE_INVALID,
        FAILURE_TYPE: "InvalidJudgeResponse",
        FAILURE_MESSAGE: JUDGE_INVALID_MESSAGE,
        TERMINAL: False,
    }


def migrated_judge_row(row: dict[str, Any]) -> dict[str, Any]:
    """An earlier run's judged-invalid result, stored as a score, as the sidecar row it should have been
    (NeMo Gym's ``migrate_invalid_judge_main_rows``); its attempt index is the marker's key."""
    return {
        **row,
        ATTEMPT_INDEX: row.get(ATTEMPT_INDEX, 0),
        FAILURE_CLASS: JUDGE_INVALID,
        FAILURE_TYPE: "InvalidJudgeResponse",
        FAILURE_MESSAGE: JUDGE_INVALID_MESSAGE,
        FAILURE_HTTP_STATUS: None,
        FAILURE_RESPONSE_BODY: None,
        TERMINAL: False,
        MIGRATED_INVALID_JUDGE: True,
    }


def earlier_tries(earlier: Sequence[Attempt]) -> list[dict[str, Any]]:
    """What each earlier try got, without its message or body: the row's own are the ones that stand,
    and a list (not a count) is no number the default metrics would average for a counted failure."""
    tries = []
    for attempt in earlier:
        failure = attempt.failure
        assert failure is not None  # only a try without a reply is tried again
        tries.append(
            {
                FAILURE_CLASS: failure.failure_class,
                FAILURE_TYPE: failure.type,
                FAILURE_HTTP_STATUS: failure.http_status,
                ELAPSED: round(attempt.elapsed, 6),
            }
        )
    return tries
