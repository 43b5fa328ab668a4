"""A scriptable agent server for tests: a real aiohttp server on 127.0.0.1, in its own thread.

Tests run pytest in-process (``pytester``), which blocks the calling thread, so the
server gets a thread and loop of its own. Each request is answered by a ``behaviour``
callable that sees the row and how many times this (task, rollout) was seen before,
and returns a ``Reply``. The server records every request and the peak number of
requests in flight, which is how tests measure the concurrency actually reached.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import orjson
from aiohttp import web

from pytest_rollouts.store.jsonl import loads  # as Python's json reads: a lone surrogate (half an emoji) too


@dataclass(frozen=True)
class Reply:
    """What to answer: JSON, raw bytes, a hang-up, or silence (``delay`` first, in seconds)."""

    status: int = 200
    json: Any = None
    raw: bytes | None = None
    reset: bool = False
    delay: float = 0.0
    # Extra reply headers (``Retry-After``), for the fake model server (``models.py``).
    headers: tuple[tuple[str, str], ...] = ()


def verifier(row: dict[str, Any], seen: int) -> Reply:
    """Reward 1.0 when the row's ``answer`` equals its ``expected_answer``; echoes like NeMo Gym."""
    reward = 1.0 if row.get("answer") == row.get("expected_answer") else 0.0
    return Reply(
        json={
            "responses_create_params": row.get("responses_create_params"),
            "response": {"id": "r", "output": [], "usage": {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}},
            "reward": reward,
        }
    )


Behaviour = Callable[[dict[str, Any], int], Reply]


class LoopServer:
    """A server on its own thread and event loop, started and stopped as a context manager:
    tests run pytest in their own thread, which blocks. Subclasses set ``url`` in ``_start``."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError


class AppServer(LoopServer):
    """An aiohttp app (``_app``) served on 127.0.0.1, on a free port."""

    _runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


class ScriptedAgent(AppServer):
    def __init__(
        self,
        behaviour: Behaviour = verifier,
        latency: float = 0.0,
        aggregate: Callable[[dict[str, Any]], Any] | None = None,
        health: Reply | None = Reply(json={"status": "ok"}),
    ) -> None:
        self.behaviour = behaviour
        self.latency = latency
        self.aggregate = aggregate
        self.health = health
        self.health_checks = 0
        self.headers: list[dict[str, str]] = []
        self.aggregate_bodies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []  # each /run body as sent, for what orjson would not read back exactly
        # When each /run arrived (time.monotonic), in arrival order.
        self.arrivals: list[float] = []
        # The client's port each /run came from, in arrival order: a connection belongs to one process.
        self.ports: list[int] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.completed = 0
        self._seen: Counter[tuple[Any, Any]] = Counter()
        super().__init__()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/run", self._run)
        if self.health is not None:
            app.router.add_get("/health", self._health)
        if self.aggregate is not None:
            app.router.add_post("/aggregate_metrics", self._aggregate)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        self.headers.append(dict(request.headers))
        assert self.health is not None
        if self.health.delay:
            await asyncio.sleep(self.health.delay)
        body = self.health.raw if self.health.raw is not None else orjson.dumps(self.health.json)
        return web.Response(status=self.health.status, body=body, content_type="application/json")

    async def _aggregate(self, request: web.Request) -> web.Response:
        body = loads(await request.read())
        self.aggregate_bodies.append(body)
        self.headers.append(dict(request.headers))
        assert self.aggregate is not None
        reply = self.aggregate(body)
        if isinstance(reply, Reply) and reply.raw is not None and not reply.reset:
            return web.Response(status=reply.status, body=reply.raw, content_type="application/json")
        if isinstance(reply, Reply) and reply.reset:  # ``raw`` as the only bytes sent: not even HTTP
            assert request.transport is not None
            request.transport.write(reply.raw or b"")
            request.transport.close()
            raise ConnectionResetError("scripted hang-up")
        if isinstance(reply, Reply):  # an error reply, raw bytes, or a slow one
            await asyncio.sleep(reply.delay)
            body = reply.raw if reply.raw is not None else orjson.dumps(reply.json)
            return web.Response(status=reply.status, body=body, content_type="application/json")
        return web.Response(body=orjson.dumps(reply), content_type="application/json")

    async def _run(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.bodies.append(body)
        row = loads(body)
        self.headers.append(dict(request.headers))
        key = (row.get("_ng_task_index"), row.get("_ng_rollout_index"))
        seen = self._seen[key]
        self._seen[key] += 1
        self.requests.append(row)
        self.arrivals.append(time.monotonic())
        self.ports.append(request.transport.get_extra_info("peername")[1] if request.transport else 0)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            reply = self.behaviour(row, seen)
            if self.latency or reply.delay:
                await asyncio.sleep(self.latency + reply.delay)
            if reply.reset:
                assert request.transport is not None
                request.transport.abort()
                raise ConnectionResetError("scripted reset")
            headers = dict(reply.headers)
            if reply.raw is not None:
                return web.Response(status=reply.status, body=reply.raw, headers=headers)
            body = orjson.dumps(reply.json)
            return web.Response(status=reply.status, body=body, content_type="application/json", headers=headers)
        finally:
            self.in_flight -= 1
            self.completed += 1

    def keys(self) -> list[tuple[int, int]]:
        return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in self.requests]


class ThrottlingAgent(ScriptedAgent):
    """Past ``capacity`` requests at once, a 429 that asks for a retry at once (a gateway takes time
    too: held, it counts as in flight); else a reward after ``delay``. What an adaptive limit adapts to."""

    def __init__(self, capacity: int, delay: float = 0.02) -> None:
        super().__init__(self._throttled)
        self.capacity = capacity
        self.delay = delay

    def _throttled(self, row: dict[str, Any], seen: int) -> Reply:
        if self.in_flight > self.capacity:
            return Reply(status=429, json={"detail": "slow down"}, headers=(("Retry-After", "0"),), delay=0.01)
        return Reply(json={"reward": 1.0}, delay=self.delay)
