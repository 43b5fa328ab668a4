"""The built-in model agent: one rollout is a tool-call loop against the model, then the verifier.

It answers what an agent's ``/run`` answers, from the same materialized row, without an HTTP
hop of its own: the dispatcher calls ``run`` where it would have posted the row (see
``docs/model-agents.md`` for why). The result is NeMo Gym-shaped: ``response`` (the final
response, Responses-shaped whatever the model's API, with every turn's output and the summed
usage), ``reward`` and the verifier's other fields, ``ng_trajectory`` (each turn, model call and tool
call, ``model/trajectory.py``) and ``ng_perf`` built from it as NeMo Gym's collector builds it.
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable
from typing import Any

from orjson import OPT_SERIALIZE_NUMPY

from pytest_rollouts.datatype import datatype
from pytest_rollouts.model.cache import ResponseCache
from pytest_rollouts.model.calls import ModelCallError, ModelClient
from pytest_rollouts.model.convert import (
    chat_request,
    input_items,
    response_of_chat,
    responses_request,
    responses_usage,
)
from pytest_rollouts.model.spec import CHAT, ModelPlan
from pytest_rollouts.model.tools import Toolbox
from pytest_rollouts.model.trajectory import TrajectoryLog
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.rows.records import Failure
from pytest_rollouts.rows.schema import (
    AGENT_RUN_ERROR,
    CACHE_HITS,
    CACHE_MISSES,
    CREATE_PARAMS,
    MAX_BODY_CHARS,
    PERF,
    ROLLOUT_INDEX,
    TASK_INDEX,
    TRAJECTORY,
)
from pytest_rollouts.rows.trajectory import build_perf
from pytest_rollouts.store.jsonl import dumps, loads

Verifier = Callable[[dict[str, Any], dict[str, Any]], Any]


@datatype(slots=True)
class _Tokens:
    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0

    def add(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.input += _count(usage.get("input_tokens"))
        self.output += _count(usage.get("output_tokens"))
        self.cached += _count((usage.get("input_tokens_details") or {}).get("cached_tokens"))
        self.reasoning += _count((usage.get("output_tokens_details") or {}).get("reasoning_tokens"))


class ModelAgent:
    def __init__(
        self,
        plan: ModelPlan,
        client: ModelClient,
        verifier: Verifier,
        tools: Toolbox | None,
        redact: Redactor,
        cache: ResponseCache | None = None,
    ) -> None:
        self._plan = plan
        self._client = client
        self._verifier = verifier
        self._tools = tools
        self._redact = redact
        self._cache = cache

    async def run(self, row: dict[str, Any]) -> dict[str, Any] | Failure:
        """One rollout of ``row``: its reply, or why it has none."""
        params = dict(row.get(CREATE_PARAMS) or {})
        params["model"] = self._plan.model_name
        for key in UNANSWERED:  # forced off: the loop needs each reply whole, in one answer
            params.pop(key, None)
        items = input_items(params)
        schemas = self._tools.schemas if self._tools is not None else []
        chat = self._plan.api == CHAT
        rollout = f"{row.get(TASK_INDEX)}.{row.get(ROLLOUT_INDEX)}"
        started = time.monotonic()
        log = TrajectoryLog(_task_id(row), f"{row.get(TASK_INDEX)}-{row.get(ROLLOUT_INDEX)}", _DIALECTS[chat])
        outputs: list[dict[str, Any]] = []
        tokens = _Tokens()
        turns = 0
        question: list[Any] = list(items)
        cached = _CacheUse(row.get(ROLLOUT_INDEX)) if self._cache is not None else None
        while True:
            body = chat_request(params, items, schemas) if chat else responses_request(params, items, schemas)
            called = time.time()
            try:
                reply = await self._ask(body, rollout, cached)
            except ModelCallError as exc:
                return Failure(exc.failure_class, exc.kind, str(exc), exc.status, exc.body)
            response = response_of_chat(reply) if chat else reply
            turns += 1
            tokens.add(response.get("usage"))
            log.call(called, question, reply, response)
            new = [item for item in response.get("output") or () if isinstance(item, dict)]
            items += new
            outputs += new
            calls = [item for item in new if item.get("type") == "function_call"]
            if not calls or self._tools is None or turns >= self._plan.max_turns:
                break
            question = []
            for call in calls:
                began = time.time()
                text = await self._tools.call(str(call.get("name")), call.get("arguments") or "")
                log.tool(call, began, text)
                result = {"type": "function_call_output", "call_id": call.get("call_id"), "output": text}
                items.append(result)
                outputs.append(result)
                question.append(result)
        usage = responses_usage(tokens.input, tokens.output, cached=tokens.cached, reasoning=tokens.reasoning)
        final = {**response, "output": outputs, "usage": usage}
        return await self._verified(row, final, log, started, cached)

    async def _ask(self, body: dict[str, Any], rollout: str, cached: _CacheUse | None) -> dict[str, Any]:
        """The model's reply to ``body``: the cache's when it keeps one, else the model's, kept when usable."""
        key = None
        if self._cache is not None and cached is not None:
            key = self._cache.key(self._plan.api, body, cached.repeat)
            reply = self._cache.get(key)
            if reply is not None:
                cached.hits += 1
                return reply
            cached.misses += 1
        reply = await self._client.create(body, rollout)
        missing = _missing_part(reply, self._plan.api == CHAT)
        if missing:  # a gateway's empty answer, scored as a wrong one, would drag the score down unseen
            text = self._redact.cut(dumps(reply).decode(), MAX_BODY_CHARS)
            raise ModelCallError(AGENT_RUN_ERROR, "InvalidModelReply", f"the model's reply has {missing}", 200, text)
        if self._cache is not None and key is not None:
            self._cache.put(key, reply)
        return reply

    async def _verified(
        self,
        row: dict[str, Any],
        final: dict[str, Any],
        log: TrajectoryLog,
        started: float,
        cached: _CacheUse | None = None,
    ) -> dict[str, Any] | Failure:
        """The reply: the final response scored by the suite's verifier. A verifier that raises (or
        returns neither a number nor a dict) is a rollout that ran and broke, its traceback kept."""
        try:
            score = self._verifier(row, final)
            if inspect.isawaitable(score):
                score = await score
            # What the verifier returns is written as JSON: numpy's numbers and booleans become JSON's,
            # and anything that cannot be written is the verifier's failure, not the dispatcher's.
            score = loads(dumps(score, option=OPT_SERIALIZE_NUMPY))
        except (Exception, SystemExit) as exc:
            return Failure(
                AGENT_RUN_ERROR,
                "VerifierError",
                f"the verifier raised {type(exc).__name__}: {exc}",
                # Its end says where it broke: the part kept when it is cut.
                body=(self._redact(traceback.format_exc()) or "")[-MAX_BODY_CHARS:],
            )
        reply: dict[str, Any] = {"response": final}
        if isinstance(score, dict):
            reply.update(score)
        elif isinstance(score, int | float):
            reply["reward"] = float(score)
        else:
            return Failure(
                AGENT_RUN_ERROR,
                "VerifierError",
                f"the verifier returned {type(score).__name__}, not a number or a dict",
                body=self._redact.cut(repr(score), MAX_BODY_CHARS),
            )
        # Both records are the collector's to write (``schema.OBSERVABILITY_KEYS``): a verifier's own
        # would pass for the agent's. ``ng_perf`` is built as the collector builds an agent server's,
        # its latency the whole rollout's, verifier included.
        trajectory = log.record()
        reply[TRAJECTORY] = trajectory
        perf = build_perf(trajectory, round(1000 * (time.monotonic() - started), 3))
        if perf is not None and cached is not None:  # the run's summary counts them (``scoring/usage.py``)
            perf.update({CACHE_HITS: cached.hits, CACHE_MISSES: cached.misses})
        reply[PERF] = perf
        return reply


@datatype(slots=True)
class _CacheUse:
    """One rollout's model calls answered from the cache and sent to the model."""

    repeat: object
    hits: int = 0
    misses: int = 0


# Request fields that would make the model answer otherwise than with the whole reply at once: a
# stream of events, or a background job to poll.
UNANSWERED = ("stream", "stream_options", "background")


def _missing_part(reply: dict[str, Any], chat: bool) -> str:
    """What a 2xx reply lacks to be an answer at all, or ""."""
    if chat:
        choices = reply.get("choices")
        return "" if isinstance(choices, list) and choices and isinstance(choices[0], dict) else "no choices"
    return "" if isinstance(reply.get("output"), list) else "no output list"


# A trajectory model call's ``dialect``, NeMo Gym's names for the two APIs its model servers capture.
_DIALECTS = {True: "chat_completions", False: "responses"}


def _task_id(row: dict[str, Any]) -> str:
    """The trajectory's task id as NeMo Gym's ``_trajectory_identity`` picks it: the dataset's own id
    when the row has one, else the task index."""
    for key in ("task_id", "problem_id", "instance_id"):
        if row.get(key) is not None:
            return str(row[key])
    return str(row.get(TASK_INDEX))


def _count(value: Any) -> int:
    return value if type(value) is int else 0
