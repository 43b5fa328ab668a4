"""One sample run for the report tests: twelve tasks whose replies cover every kind of row the
report shows (a tool call, markup, an HTTP 500, a long answer, no reward), through the Python API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_rollouts import CollectionConfig, run
from pytest_rollouts.report.rollouts import TEXT_CAP

from ..agents import Reply, ScriptedAgent
from ..helpers import write_rows

INJECTION = "</script><script>alert(1)</script><!-- <b>bold</b>"


LONG = "x" * (TEXT_CAP + 3000)


ROWS = 12


def turns(reward: float | None, answer: str, **fields: Any) -> dict[str, Any]:
    """A NeMo Gym-shaped reply: a tool call, its output, then the final message."""
    output = [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"key": "capital"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Paris"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
    ]
    reply = {"response": {"id": "r", "output": output}, "extracted_answer": answer, **fields}
    return reply if reward is None else {**reply, "reward": reward}


def behaviour(flipped: bool = False):
    """By the row's ``n`` (mod 6): right with a tool call; an answer full of markup; HTTP 500; a
    very long answer at 0.5; no reward; right. ``flipped``: the baseline's, where the markup answer
    was right and the last kind wrong, so the candidate breaks some tasks and fixes others."""

    def reply(row: dict[str, Any], seen: int) -> Reply:
        kind = row["n"] % 6
        if kind == 2:
            return Reply(status=500, json={"detail": "agent broke <here>"})
        if kind == 1:
            return Reply(json=turns(1.0 if flipped else 0.0, INJECTION, judge_note=INJECTION))
        if kind == 3:
            return Reply(json=turns(0.5, LONG))
        if kind == 4:
            return Reply(json=turns(None, "no verdict"))
        return Reply(json=turns(0.0 if flipped and kind == 5 else 1.0, "Paris", judge_note="exact match"))

    return reply


def dataset(root: Path) -> Path:
    rows = [
        {
            "n": n,
            "responses_create_params": {"input": f"What is the capital of France? (q{n})"},
            "expected_answer": "Paris",
        }
        for n in range(ROWS)
    ]
    return write_rows(root / "data.jsonl", rows)


def make_run(root: Path, out: str = "out/r.jsonl", flipped: bool = False, repeats: int = 2, **config: Any):
    """A run of ``ROWS`` tasks, ``repeats`` rollouts each, through the Python API; its ``RunResult``."""
    dataset(root)
    with ScriptedAgent(behaviour(flipped)) as agent:
        return run(
            CollectionConfig(
                input=str(root / "data.jsonl"),
                out=str(root / out),
                agents={"policy": agent.url},
                repeats=repeats,
                retries=0,
                **config,
            )
        )
