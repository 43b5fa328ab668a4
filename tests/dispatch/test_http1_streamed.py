"""A streamed request body (``/aggregate_metrics``' rows read from disk as sent) against raw
servers: ``Expect: 100-continue``, and what each kind of server gets of the body."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_rollouts.net import http1
from pytest_rollouts.net.http1 import Pool, Target

from .raw_server import Server, server

CHUNK = b"x" * 65536


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        body += (await reader.readexactly(size + 2))[:-2]
    await reader.readuntil(b"\r\n")
    return body


def pieces(count: int, taken: list[int]) -> Iterator[bytes]:
    """``count`` chunks, each noted in ``taken`` as the client takes it."""
    for _ in range(count):
        taken.append(1)
        yield CHUNK


async def stream_to(url: str, count: int, taken: list[int], within: float = 10) -> http1.Reply:
    pool = Pool(connect_timeout=5)
    try:
        async with asyncio.timeout(within):
            return await pool.request(Target.of("POST", url, "/aggregate_metrics", {}), pieces(count, taken))
    finally:
        pool.close()


@pytest.mark.asyncio
async def test_a_refusal_from_the_head_gets_none_of_the_body_however_long_it_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server without the endpoint answers 404 from the head (``Expect: 100-continue``): not a
    piece of the body is read from disk or sent."""
    monkeypatch.setattr(http1, "CONTINUE_WAIT_S", 30.0)

    async def refuses(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        box.heads.append(await reader.readuntil(b"\r\n\r\n"))
        await asyncio.sleep(0.2)  # time enough to send it all, had the client not waited
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()

    taken: list[int] = []
    async with server(refuses) as agent:
        reply = await stream_to(agent.url, 50, taken)
    assert reply.status == 404 and taken == [], "a piece of the body was read to be sent"
    assert b"\r\nExpect: 100-continue\r\n" in agent.heads[0]


def takes_the_body(received: list[bytes], say_continue: bool) -> Any:
    """A server that reads the whole body (after its ``100 Continue``, or without one) and answers 200."""

    async def script(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        box.heads.append(await reader.readuntil(b"\r\n\r\n"))
        if say_continue:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        received.append(await read_chunked(reader))
        writer.write(ok(b'{"ok": true}'))
        await writer.drain()

    return script


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("say_continue", "wait"),
    # A go-ahead is not waited out: 30 s against the request's own bound of 10 s. Without one, the
    # body still goes once the client stops waiting.
    [(True, 30.0), (False, 0.05)],
    ids=["100-continue", "ignores-the-expectation"],
)
async def test_the_body_goes_whole_on_the_go_ahead_or_after_the_wait(
    say_continue: bool, wait: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1, "CONTINUE_WAIT_S", wait)
    received: list[bytes] = []
    taken: list[int] = []
    async with server(takes_the_body(received, say_continue)) as agent:
        reply = await stream_to(agent.url, 5, taken)
    assert reply.status == 200 and reply.body == b'{"ok": true}'
    assert received == [CHUNK * 5] and len(taken) == 5


@pytest.mark.asyncio
async def test_a_server_that_refuses_the_expectation_is_asked_again_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """417 Expectation Failed, before any of the body: the same request again, without ``Expect``."""
    monkeypatch.setattr(http1, "CONTINUE_WAIT_S", 30.0)
    received: list[bytes] = []

    async def no_expectations(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        box.heads.append(head)
        if b"Expect:" in head:
            writer.write(b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        received.append(await read_chunked(reader))
        writer.write(ok(b"{}"))
        await writer.drain()

    taken: list[int] = []
    async with server(no_expectations) as agent:
        reply = await stream_to(agent.url, 3, taken)
    assert reply.status == 200 and received == [CHUNK * 3] and len(agent.heads) == 2
    assert b"Expect:" not in agent.heads[1]


@pytest.mark.asyncio
async def test_a_request_stopped_while_it_waits_for_the_go_ahead_leaves_no_reply_unread() -> None:
    """Cut off by its deadline (or Ctrl-C) in the wait: the reply it will never read is cancelled,
    not failed later with an error nobody retrieves (which asyncio logs)."""
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: unretrieved.append(context))

    async def silent(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        box.heads.append(await reader.readuntil(b"\r\n\r\n"))
        await asyncio.sleep(10)

    taken: list[int] = []
    async with server(silent) as agent:
        with pytest.raises(TimeoutError):
            await stream_to(agent.url, 3, taken, within=0.2)
        for _ in range(3):  # the aborted connection's loss is handled in a later turn of the loop
            await asyncio.sleep(0.01)
    gc.collect()  # an unretrieved exception is reported as its future is collected
    assert taken == [] and unretrieved == []
