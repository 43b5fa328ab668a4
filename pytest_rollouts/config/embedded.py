"""Agent servers the plugin starts itself, so a shipped suite runs with nothing started by hand.

A suite names an aiohttp app factory in a file of its own (``embedded = "agent.py:make_app"``);
it is served on 127.0.0.1 on a free port, in its own thread and loop so a slow handler
never stalls the dispatcher, and stopped when the session ends.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web

from pytest_rollouts.model.loading import LoadError, load_module


class EmbeddedServerError(RuntimeError):
    pass


def load_factory(file: Path, name: str) -> object:
    try:
        module = load_module(file)
    except LoadError as exc:
        raise EmbeddedServerError(str(exc)) from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise EmbeddedServerError(f"{file} has no callable {name!r}")
    return factory


class EmbeddedServers:
    """Serve each ``(file, factory)`` once, on one background loop; ``urls`` maps them to addresses."""

    def __init__(self, specs: Iterable[tuple[Path, str]]) -> None:
        self._specs = list(dict.fromkeys(specs))
        self.urls: dict[tuple[Path, str], str] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rollouts-embedded", daemon=True)
        self._runners: list[web.AppRunner] = []

    def start(self) -> dict[tuple[Path, str], str]:
        if not self._specs:
            return self.urls
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start_all(), self._loop).result()
        return self.urls

    async def _start_all(self) -> None:
        for file, name in self._specs:
            app = load_factory(file, name)()  # type: ignore[operator]
            if inspect.isawaitable(app):
                app = await app
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self._runners.append(runner)
            port = runner.addresses[0][1]
            self.urls[(file, name)] = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if not self._thread.is_alive():
            self._loop.close()
            return
        asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _stop_all(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
