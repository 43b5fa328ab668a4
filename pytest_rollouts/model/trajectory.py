"""The built-in model agent's ``ng_trajectory``: one agent invocation, a turn per model call, its tool calls.

The shape is NeMo Gym's ``TrajectoryRecord`` (schema 1.0), so the same readers (and the same
``ng_perf`` builder, ``rows/trajectory.py``) serve the model agent and any agent server that sends
its trajectory. Each model call's ``token_stats`` are what the model's reply reported, none when it
reported no usage, so the token sums say what was observed and nothing more.

A turn's ``question`` is what the model saw for the first time in that call (the prompt, then the
tool outputs), not the whole conversation again: the conversation is in ``response.output``, and
repeating it at every turn would grow a row with the square of its turns.
"""

from __future__ import annotations

import time
from typing import Any

ROOT = "root"


class TrajectoryLog:
    """A rollout's trajectory as it runs: ``call`` for each model call, ``tool`` for each tool call."""

    def __init__(self, task_id: str, rollout_id: str, dialect: str) -> None:
        self._task_id, self._rollout_id, self._dialect = task_id, rollout_id, dialect
        self._started = time.time()
        self._turns: list[dict[str, Any]] = []
        self._calls: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []

    def call(self, started: float, question: list[Any], reply: dict[str, Any], response: dict[str, Any]) -> None:
        """One model call, begun at ``started`` (``time.time()``): ``reply`` as the model sent it, and
        ``response``, its Responses-shaped twin, whose output is the turn's answer."""
        now = time.time()
        number = len(self._calls) + 1
        ref = {"model_call_id": f"call-{number}"}
        output = [item for item in response.get("output") or () if isinstance(item, dict)]
        reasoning = [item for item in output if item.get("type") == "reasoning"]
        self._calls.append(
            {
                **ref,
                "started_at": started,
                "completed_at": now,
                "duration_ms": round(1000 * (now - started), 3),
                "response_metadata": {
                    "response_id": response.get("id") or None,
                    "model": response.get("model") or None,
                    "dialect": self._dialect,
                },
                "token_stats": token_stats(reply.get("usage"), chat=self._dialect == "chat_completions"),
            }
        )
        self._turns.append(
            {
                "invocation_id": ROOT,
                "task_id": self._task_id,
                "rollout_id": self._rollout_id,
                "turn_no": number,
                "timestamp": started,
                "question": question,
                "answer": [item for item in output if item.get("type") != "reasoning"],
                "reasoning_content": reasoning or None,
                "resolved": True,
                "step_count": number,
                "model_calls": [ref],
            }
        )

    def tool(self, call: dict[str, Any], started: float, output: str) -> None:
        """One tool call the model asked for, run from ``started`` to now; errors come back as text."""
        now = time.time()
        self._tools.append(
            {
                "kind": "tool_call",
                "invocation_id": ROOT,
                "tool_call_id": str(call.get("call_id") or ""),
                "tool_name": call.get("name"),
                "started_at": started,
                "completed_at": now,
                "duration_ms": round(1000 * (now - started), 3),
                "timing_source": "harness",
                "status": "completed",
                "output": output,
            }
        )

    def record(self) -> dict[str, Any]:
        """The ``ng_trajectory`` of the rollout so far."""
        return {
            "schema_version": "1.0",
            "task_id": self._task_id,
            "rollout_id": self._rollout_id,
            "invocations": [
                {
                    "kind": "agent_invocation",
                    "invocation_id": ROOT,
                    "status": "completed",
                    "duration_ms": round(1000 * (time.time() - self._started), 3),
                    "model_calls": [{"model_call_id": c["model_call_id"]} for c in self._calls],
                }
            ],
            "turns": self._turns,
            "model_calls": self._calls,
            "tool_calls": self._tools,
            "gaps": [],
        }


def token_stats(usage: Any, chat: bool) -> dict[str, int]:
    """A reply's usage as a trajectory's ``token_stats``: only the counts it reported."""
    if not isinstance(usage, dict):
        return {}
    names = ("prompt_tokens", "completion_tokens") if chat else ("input_tokens", "output_tokens")
    details = usage.get(f"{'prompt' if chat else 'input'}_tokens_details") or {}
    out_details = usage.get(f"{'completion' if chat else 'output'}_tokens_details") or {}
    found = {
        "prompt_tokens": usage.get(names[0]),
        "completion_tokens": usage.get(names[1]),
        "total_tokens": usage.get("total_tokens"),
        "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
        "reasoning_tokens": out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None,
    }
    return {name: value for name, value in found.items() if type(value) is int and value >= 0}
