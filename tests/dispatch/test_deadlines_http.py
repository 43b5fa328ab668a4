"""A server that trickles its reply a byte at a time is cut at the timeout, for the requests
pytest's own process makes: ``/aggregate_metrics`` (then scored locally) and head-server discovery.

Per-operation timeouts never trip on such a server: each byte comes well within them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from pytest_rollouts.config import agents

from ..agents import LoopServer
from ..helpers import aggregate, run_rollouts, tasks, write_rows

# Far longer than any timeout below: BYTE_INTERVAL_S per byte of a reply padded to TRICKLED_BYTES.
BYTE_INTERVAL_S = 0.05
TRICKLED_BYTES = 600
TIMEOUT = "2"  # also each /run's bound in the session: room for a loaded machine
SHORT_TIMEOUT = "0.5"  # where it bounds the trickled request alone


class TrickleServer(LoopServer):
    """A raw HTTP/1.1 server on 127.0.0.1, in a thread: ``trickled`` is answered one byte every
    ``BYTE_INTERVAL_S`` (a valid reply, if anyone waits half a minute for it); any other path at once,
    with what a NeMo Gym agent answers (``/run`` scores 1.0)."""

    def __init__(self, trickled: str, body: object) -> None:
        self.trickled = trickled
        text = json.dumps(body).encode()
        self.reply = _response(text + b" " * max(0, TRICKLED_BYTES - len(text)))
        self.cut = 0  # trickles the client hung up on
        self._server: asyncio.Server | None = None
        super().__init__()

    async def _stop(self) -> None:
        """Trickles still going (the client before the fix waits them out) end with the test."""
        assert self._server is not None
        self._server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            if path == self.trickled:  # the body is left unread: the reply starts at once
                for byte in self.reply:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(BYTE_INTERVAL_S)
                    if reader.at_eof() or writer.is_closing():
                        break
                return
            lines = head.lower().split(b"\r\n")
            length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
            row = orjson.loads(await reader.readexactly(length)) if length else {}
            usage = {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
            answer = {"responses_create_params": row.get("responses_create_params"), "response": {"usage": usage}}
            writer.write(_response(orjson.dumps({**answer, "reward": 1.0})))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.cut += 1
        finally:
            writer.close()


def _response(body: bytes) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


SERVER_METRICS = {"agent_metrics": {"mean/reward": 0.25}, "key_metrics": {"mean/reward": 0.25}}


def test_a_trickling_metrics_server_is_cut_at_the_timeout_and_scored_locally(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with TrickleServer("/aggregate_metrics", SERVER_METRICS) as server:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={server.url}", f"--rollouts-timeout={TIMEOUT}")
    result.assert_outcomes(passed=2)
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert group["metrics_source"] == "local"
    assert group["key_metrics"]["mean/reward"] == 1.0
    note = f"{server.url}/aggregate_metrics failed: no complete reply within {TIMEOUT}s; computed locally instead"
    assert group["metrics_note"] == note
    result.stdout.fnmatch_lines([f"*{note}*"])


def test_the_aggregate_command_cuts_a_trickling_metrics_server_at_its_timeout(tmp_path: Path) -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}} for t in range(2)]
    write_rows(tmp_path / "rs0_materialized_inputs.jsonl", rows)
    write_rows(tmp_path / "rs0.jsonl", [{**row, "reward": 0.5} for row in rows])
    with TrickleServer("/aggregate_metrics", SERVER_METRICS) as server:
        done = aggregate(
            tmp_path, "--input", "rs0.jsonl", "--out", "all.jsonl", "--agent", server.url, "--timeout", SHORT_TIMEOUT
        )
    assert done.returncode == 0, done.stderr
    [group] = json.loads((tmp_path / "all_aggregate_metrics.json").read_text())
    assert (group["metrics_source"], group["key_metrics"]["mean/reward"]) == ("local", 0.5)
    assert f"no complete reply within {SHORT_TIMEOUT}s; computed locally instead" in group["metrics_note"]


def test_a_trickling_head_server_is_a_usage_error_at_the_timeout(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agents, "HEAD_SERVER_TIMEOUT_S", float(SHORT_TIMEOUT))
    write_rows(pytester.path / "data.jsonl", tasks(1))
    with TrickleServer("/global_config_dict_yaml", "{}") as server:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={server.url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = f"head server at {server.url} sent no complete reply within {SHORT_TIMEOUT}s for /global_config_dict_yaml"
    result.stderr.fnmatch_lines([f"*{said}*"])
