"""Fixtures every feature folder uses: a scripted agent, and a stand-in NeMo Gym head server."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .agents import ScriptedAgent


@pytest.fixture(autouse=True)
def only_this_projects_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions a test starts (pytester's, a child ``python -m pytest``, xdist's workers) load our plugin and
    xdist and nothing else installed beside them: a machine with pytest-benchmark, hypothesis or anyio
    installed otherwise changes the sessions under test (a ``.benchmarks`` folder, a warning turned error,
    a summary line pytester cannot parse), so what a test sees would depend on the machine.

    They also write the package's byte code as an installed package has it: a machine that sets
    PYTHONDONTWRITEBYTECODE would otherwise compile the package again in every session, dispatcher
    and xdist worker the suite starts (measured: a sixth of the suite's time on 2 cores, 6:05 -> 5:04)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_PLUGINS", "rollouts,xdist")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


@pytest.fixture
def agent() -> Iterator[ScriptedAgent]:
    with ScriptedAgent() as server:
        yield server


@pytest.fixture
def head_server() -> Iterator[tuple[list[str], dict[str, str]]]:
    """A stand-in head server: ``GET /global_config_dict_yaml`` returns ``state["yaml"]`` JSON-encoded."""
    state: dict[str, str] = {"yaml": ""}
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            if self.path != "/global_config_dict_yaml":
                self.send_error(404)
                return
            body = json.dumps(state["yaml"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if state.get("encoding") == "gzip":
                body = gzip.compress(body)
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["address"] = f"127.0.0.1:{server.server_address[1]}"
    try:
        yield hits, state
    finally:
        server.shutdown()
        server.server_close()
