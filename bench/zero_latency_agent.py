"""A minimal NeMo Gym-like agent server for benchmarks, run as its own process.

It does as little as possible per request (orjson in, orjson out, no access log) so
the benchmark measures the client's dispatch cost, not the server's. It runs in a
separate process so it does not compete for the client's GIL. ``--latency`` adds a
fixed sleep per request to model a real agent and check that the client overlaps
requests. Once listening it prints ``PORT <n>`` on stdout for the parent to read.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

HOST = "127.0.0.1"


class Timeline:
    """When the first ``/run`` of a measured run arrived and its last reply went out (wall clock).

    ``GET /timeline`` returns both and starts over, so the benchmark can split a run's
    wall time into startup, dispatch and tail.
    """

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None

    def take(self) -> dict[str, float | None]:
        taken = {"first": self.first, "last": self.last}
        self.first = self.last = None
        return taken


def make_app(latency: float) -> web.Application:
    timeline = Timeline()

    async def run(request: web.Request) -> web.Response:
        if timeline.first is None:
            timeline.first = time.time()
        row: dict[str, Any] = orjson.loads(await request.read())
        if latency > 0:
            await asyncio.sleep(latency)
        reply = {
            "responses_create_params": row.get("responses_create_params"),
            "response": {
                "id": "r",
                "output": [],
                "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
            },
            "reward": 1.0 if row.get("_ng_task_index", 0) % 2 == 0 else 0.0,
        }
        timeline.last = time.time()
        return web.Response(body=orjson.dumps(reply), content_type="application/json")

    async def chat(request: web.Request) -> web.Response:
        """A zero-latency OpenAI-compatible model (``bench_model_agent.py``): the last message back."""
        if timeline.first is None:
            timeline.first = time.time()
        body: dict[str, Any] = orjson.loads(await request.read())
        if latency > 0:
            await asyncio.sleep(latency)
        reply = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }
        timeline.last = time.time()
        return web.Response(body=orjson.dumps(reply), content_type="application/json")

    async def take_timeline(_: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(timeline.take()), content_type="application/json")

    async def health(_: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type="application/json")

    app = web.Application()
    app.router.add_post("/run", run)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/timeline", take_timeline)
    return app


async def serve(port: int, latency: float) -> None:
    runner = web.AppRunner(make_app(latency), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, backlog=1024)
    await site.start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to sleep per /run")
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.port, args.latency))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
