"""Reference agent server for the arithmetic suite.

Why it exists: the suite has to run out of the box, with no model endpoint, no API key and no
network, and give the same scores on every machine, so the plugin's whole path (dispatch,
artifacts, metrics, resume) can be exercised and demonstrated for real. It speaks NeMo Gym's agent
protocol (``POST /run`` with a dataset row, reply carrying ``reward``), so it is also a small,
readable example of what a user's own agent server has to do.

It has two parts, kept apart on purpose, as in a real agent:

* ``SeededBaselinePolicy`` produces the answer text. It is a stand-in for a model, NOT a model.
* ``verify`` scores that text against the row's ``expected_answer``, knowing nothing of the policy.

pytest-rollouts loads this file by path and calls ``make_app()``. To run it as an external agent
instead: ``python agent.py --host 127.0.0.1 --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from aiohttp import web

QUESTION_RE = re.compile(r"What is (\d+) ([-+*/]) (\d+)\?")
BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


class UnprocessableRow(ValueError):
    """The request cannot be turned into a rollout; the client gets a 422 with the reason."""


class SeededBaselinePolicy:
    """A stand-in for a model, NOT a model: it never reasons and is not evidence of anything.

    It reads the question, computes the true answer, and answers it correctly with a probability
    that falls with difficulty; otherwise it is off by a small amount. Scores therefore spread
    over tasks and repeats the way a model's do, which makes metrics, pass@k and regressions
    visible. Its randomness is seeded from the question, the rollout index and the request seed,
    so every rollout is reproducible across runs, machines and concurrency levels.
    """

    model: ClassVar[str] = "seeded-baseline"
    p_correct: ClassVar[Mapping[int, float]] = MappingProxyType({1: 0.9, 2: 0.65, 3: 0.4})

    def answer(self, question: str, difficulty: int, rollout_index: int, seed: Any) -> str:
        """The answer text for one rollout, ending in ``\\boxed{<answer>}``."""
        match = QUESTION_RE.search(question)
        if match is None:
            raise UnprocessableRow(f"not an arithmetic question: {question!r}")
        if not isinstance(difficulty, int) or difficulty not in self.p_correct:
            raise UnprocessableRow(f"difficulty must be one of {sorted(self.p_correct)}")
        a, op, b = int(match[1]), match[2], int(match[3])
        if op == "/" and b == 0:
            raise UnprocessableRow("division by zero")
        truth = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
        # A string seed: random.Random hashes it with SHA-512, independent of PYTHONHASHSEED.
        rng = random.Random(f"{question}|{rollout_index}|{seed}")
        correct = rng.random() < self.p_correct[difficulty]
        value = truth if correct else truth + rng.choice((-2, -1, 1, 2))
        return f"{a} {op} {b} = {value}, so the answer is \\boxed{{{value}}}"


BASELINE = SeededBaselinePolicy()  # stateless: one instance serves every request


def verify(text: str, expected_answer: str) -> tuple[float, str | None]:
    """Reward 1.0 when the last ``\\boxed{...}`` in ``text`` equals ``expected_answer`` exactly
    (after stripping whitespace), else 0.0; also returns the extracted answer (None if absent)."""
    boxed = BOXED_RE.findall(text)
    extracted = boxed[-1].strip() if boxed else None
    return (1.0 if extracted == expected_answer.strip() else 0.0), extracted


def user_text(params: dict[str, Any]) -> str:
    """All user text in a Responses API ``input``: a plain string, or messages whose content is a
    string or a list of ``input_text`` parts."""
    items = params.get("input")
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        raise UnprocessableRow("responses_create_params.input must be a string or a list")
    texts = []
    for item in items:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [
                p["text"]
                for p in content
                if isinstance(p, dict) and p.get("type") == "input_text" and isinstance(p.get("text"), str)
            ]
    return "\n".join(texts)


def request_seed(params: dict[str, Any]) -> Any:
    """The seed NeMo Gym's ``num_repeats_add_seed`` puts in ``metadata.extra_body`` (a JSON
    string such as ``{"seed": 3}``), or None when there is none."""
    metadata = params.get("metadata")
    extra_body = metadata.get("extra_body") if isinstance(metadata, dict) else None
    if extra_body is None:
        return None
    try:
        return json.loads(extra_body).get("seed")
    except (TypeError, ValueError, AttributeError) as exc:
        raise UnprocessableRow(f"metadata.extra_body is not a JSON object string: {exc}") from exc


def rollout(row: dict[str, Any], policy: SeededBaselinePolicy) -> dict[str, Any]:
    """Run one rollout and build the reply NeMo Gym's agents send (no ``agent_ref``/``_ng_*``:
    the collector adds those to the stored row itself)."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise UnprocessableRow("the row needs a responses_create_params object")
    expected = row.get("expected_answer")
    if not isinstance(expected, str):
        raise UnprocessableRow("the row needs a string expected_answer")
    question = user_text(params)
    task, repeat = row.get("_ng_task_index", 0), row.get("_ng_rollout_index", 0)
    text = policy.answer(question, row.get("difficulty"), repeat, request_seed(params))
    reward, extracted = verify(text, expected)
    input_tokens, output_tokens = len(question.split()), len(text.split())
    return {
        "responses_create_params": params,
        "response": {
            "id": f"resp_{task}_{repeat}",
            "object": "response",
            "model": policy.model,
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
            ],
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        },
        "reward": reward,
        "expected_answer": expected,
        "extracted_answer": extracted,
    }


async def handle_run(request: web.Request) -> web.Response:
    """``POST /run``: one rollout per request; a row it cannot use gets 422, as in NeMo Gym."""
    try:
        try:
            row = json.loads(await request.read())
        except ValueError as exc:
            raise UnprocessableRow(f"the body is not JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise UnprocessableRow("the body must be a JSON object")
        return web.json_response(rollout(row, BASELINE))
    except UnprocessableRow as exc:
        return web.json_response({"error": str(exc)}, status=422)


async def handle_health(request: web.Request) -> web.Response:
    """``GET /health``: the plugin polls this until the server is up."""
    return web.json_response({"status": "ok"})


def make_app() -> web.Application:
    """The agent as an aiohttp application; pytest-rollouts serves it on a free local port."""
    app = web.Application()
    app.router.add_post("/run", handle_run)
    app.router.add_get("/health", handle_health)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve the arithmetic reference agent.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    args = parser.parse_args()
    web.run_app(make_app(), host=args.host, port=args.port)
