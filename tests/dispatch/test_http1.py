"""The lean HTTP/1.1 client against raw servers on 127.0.0.1 that answer byte for byte as scripted.

aiohttp's server would always answer well-formed HTTP; these servers also answer the
ways real agents and proxies do (chunked, read-until-close, gzip, ``Connection: close``,
idle timeouts) and the ways broken ones do (garbage, hang-ups, resets).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import os
import shutil
import socket
import ssl
import struct
import subprocess
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from pytest_rollouts.net import http1
from pytest_rollouts.net.address import Address
from pytest_rollouts.net.http1 import HttpError, Pool, Target

from .raw_server import Server, answering, server


def ok(body: bytes, *headers: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def post(pool: Pool, url: str, body: bytes = b"{}", **headers: str) -> http1.Reply:
    try:
        async with asyncio.timeout(5):
            return await pool.request(Target.of("POST", url, "/run", headers), body, error_limit=8)
    finally:
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_one_connection_carries_requests_one_after_another() -> None:
    async with server(answering(ok(b'{"a":1}'), ok(b'{"a":2}'), ok(b'{"a":3}'))) as agent:
        pool = Pool(5)
        bodies = [(await post(pool, agent.url)).body for _ in range(3)]
        pool.close()
    assert bodies == [b'{"a":1}', b'{"a":2}', b'{"a":3}']
    assert agent.connections == 1


@pytest.mark.asyncio
async def test_request_head_names_host_path_length_and_each_header_once() -> None:
    async with server(answering(ok(b"{}"))) as agent:
        pool = Pool(5)
        headers = {"Content-Type": "application/json", "X-Key": "k"}
        target = Target.of("POST", agent.url + "/prefix/?x=1", "/run", headers)
        await pool.request(target, b'{"q": 1}')
        pool.close()
    lines = agent.heads[0].decode().split("\r\n")
    port = agent.url.rsplit(":", 1)[1]
    assert lines[0] == "POST /prefix/run?x=1 HTTP/1.1"
    assert sorted(lines[1:-2]) == sorted(
        [f"Host: 127.0.0.1:{port}", "Content-Type: application/json", "X-Key: k", "Content-Length: 8"]
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reply", "connections"),
    [
        pytest.param(
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n',
            1,
            id="chunked",
        ),
        pytest.param(ok(gzip.compress(b'{"a":1}'), "Content-Encoding: gzip"), 1, id="gzip"),
        pytest.param(ok(zlib.compress(b'{"a":1}'), "Content-Encoding: deflate"), 1, id="deflate"),
        pytest.param(ok(zlib.compress(b'{"a":1}')[2:-4], "Content-Encoding: deflate"), 1, id="raw-deflate"),
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"a":1}'), 1, id="after-100-continue"),
        pytest.param(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok(b'{"a":1}'), 1, id="after-103"),
        pytest.param(ok(b'{"a":1}', "Content-Encoding: UTF-8"), 1, id="unknown-coding-as-none"),
        pytest.param(ok(b'{"a":1}', "Content-Encoding: "), 1, id="empty-coding"),
        # Sloppy servers that aiohttp's parser tolerated: bare LF, a space after a chunk size.
        pytest.param(b'HTTP/1.1 200 OK\nContent-Length: 7\n\n{"a":1}', 1, id="bare-lf"),
        pytest.param(
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7 \r\n{"a":1}\r\n0\r\n\r\n', 1, id="chunk-size-space"
        ),
        # No length: the body ends with the connection, so each reply takes one.
        pytest.param(b'HTTP/1.0 200 OK\r\n\r\n{"a":1}', 2, id="read-until-close"),
    ],
)
async def test_reply_bodies_are_read_whole_and_decoded(reply: bytes, connections: int) -> None:
    # A server that closes after a reply answers one per connection.
    script = answering(reply, then_close=True) if connections > 1 else answering(reply, reply)
    async with server(script) as agent:
        pool = Pool(5)
        first, second = await post(pool, agent.url), await post(pool, agent.url)
        pool.close()
    assert first.body == second.body == b'{"a":1}'
    assert agent.connections == connections


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "junk",
    [b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", b"H", ok(b'{"a":9}')],
    ids=["head", "byte", "whole-reply"],
)
async def test_bytes_after_a_reply_in_the_same_read_retire_its_connection(junk: bytes) -> None:
    """They would be read as the start of the next request's reply."""
    async with server(answering(ok(b'{"a":1}') + junk, ok(b'{"a":2}'))) as agent:
        pool = Pool(5)
        first, second = await post(pool, agent.url), await post(pool, agent.url)
        pool.close()
    assert first.body == second.body == b'{"a":1}'
    assert agent.connections == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("coding", "pack"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", lambda data: zlib.compress(data)[2:-4])],
    ids=["gzip", "deflate", "raw-deflate"],
)
async def test_a_compressed_error_body_keeps_what_its_kept_start_decodes_to(
    coding: str, pack: Callable[[bytes], bytes]
) -> None:
    text = os.urandom(30_000).hex().encode()
    packed = pack(text)
    error = f"HTTP/1.1 500 Oops\r\nContent-Encoding: {coding}\r\nContent-Length: {len(packed)}\r\n\r\n".encode()
    async with server(answering(error + packed)) as agent:
        pool = Pool(5)
        reply = await pool.request(Target.of("POST", agent.url, "/run", {}), b"{}", error_limit=2000)
        pool.close()
    assert reply.status == 500
    assert reply.body == text[:2000]


@pytest.mark.asyncio
async def test_url_path_host_and_credentials_are_sent_as_aiohttp_sent_them() -> None:
    async with server(answering(ok(b"{}"))) as agent:
        pool = Pool(5)
        port = agent.url.rsplit(":", 1)[1]
        target = Target.of("POST", f"http://u:p%40ss@127.0.0.1:{port}/pr\u00e9fix?q=\u00e9&r=%41#top", "/run", {})
        await pool.request(target, b"{}")
        pool.close()
    lines = agent.heads[0].decode().split("\r\n")
    assert lines[0] == "POST /pr%C3%A9fix/run?q=%C3%A9&r=%41 HTTP/1.1"
    assert f"Authorization: Basic {base64.b64encode(b'u:p@ss').decode()}" in lines
    assert target.url == f"http://127.0.0.1:{port}/pr\u00e9fix/run?q=\u00e9&r=%41"
    given = Target.of("POST", f"http://u:p@127.0.0.1:{port}", "/run", {"Authorization": "Bearer t"})
    assert b"Basic" not in given.head and b"Authorization: Bearer t" in given.head
    # A lone % is escaped, an escape kept, as yarl does: ?q=50%off was an invalid request target.
    assert Address.parse("http://h:1/a%2Fb%zz?q=50%off&r=%41", "/run").path == "/a%2Fb%25zz/run?q=50%25off&r=%41"
    # As yarl encodes it (UTS 46): IDNA 2003 would send another host, strasse.de.
    assert Address.parse("http://stra\u00dfe.de:8000").host == "xn--strae-oqa.de"


@pytest.mark.asyncio
async def test_101_switching_protocols_is_its_status_without_a_logged_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with server(
        answering(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
    ) as agent:
        pool = Pool(5)
        reply = await post(pool, agent.url)
        pool.close()
    assert reply.status == 101
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.asyncio
@pytest.mark.parametrize("hangs_up", [True, False], ids=["and-hangs-up", "socket-left-open"])
async def test_connection_close_and_idle_hang_ups_get_a_fresh_connection(hangs_up: bool) -> None:
    """A server that says ``Connection: close``, or closes an idle kept-alive connection (uvicorn
    does after 5 s), costs a new connection, never a failed request."""
    async with server(answering(ok(b"{}", "Connection: close"), then_close=hangs_up)) as agent:
        pool = Pool(5)
        for _ in range(3):
            await post(pool, agent.url)
            await asyncio.sleep(0.05)  # the hang-up reaches the client before the next request
        pool.close()
    assert agent.connections == 3


@pytest.mark.asyncio
async def test_a_connection_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "KEEP_IDLE_S", 0.0)
    async with server(answering(ok(b"{}"), ok(b"{}"))) as agent:
        pool = Pool(5)
        await post(pool, agent.url)
        await asyncio.sleep(0.01)
        await post(pool, agent.url)
        pool.close()
    assert agent.connections == 2


@pytest.mark.asyncio
async def test_an_error_body_is_cut_and_its_connection_kept() -> None:
    error = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 26\r\n\r\nabcdefghijklmnopqrstuvwxyz"
    async with server(answering(error, ok(b'{"a":1}', "Retry-After: 7"))) as agent:
        pool = Pool(5)
        first, second = await post(pool, agent.url), await post(pool, agent.url)
        pool.close()
    assert (first.status, first.body) == (500, b"abcdefgh")
    assert (second.status, second.body, second.header(b"retry-after")) == (200, b'{"a":1}', "7")
    assert agent.connections == 1


@pytest.mark.asyncio
async def test_an_error_reply_is_settled_once_its_kept_part_is_read() -> None:
    """A 502 from a proxy that neither gives a length nor hangs up: its status is the answer, now,
    not a timeout (which would not even be retried). With a length it is read to its end, and its
    connection kept (``test_an_error_body_is_cut_and_its_connection_kept``)."""
    left_open = b"HTTP/1.1 502 Bad Gateway\r\n\r\n" + b"x" * 20

    async with server(answering(left_open)) as agent:
        pool = Pool(5)
        async with asyncio.timeout(2):
            reply = await pool.request(Target.of("POST", agent.url, "/run", {}), b"{}", error_limit=8)
        pool.close()
    assert (reply.status, reply.body) == (502, b"xxxxxxxx")


@pytest.mark.asyncio
async def test_a_read_limit_settles_a_reply_that_never_ends() -> None:
    """A ``/health`` that streams: judged on its first bytes, not waited on until the check times out."""
    chunk = b"x" * 100_000
    streaming = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + f"{len(chunk):x}\r\n".encode() + chunk

    async with server(answering(streaming)) as agent:
        pool = Pool(5)
        async with asyncio.timeout(2):
            reply = await pool.request(Target.of("GET", agent.url, "/health", {}), read_limit=65536)
        pool.close()
    assert (reply.status, reply.body) == (200, b"x" * 65536)


def hang_up_after(data: bytes, *, reset: bool = False) -> Callable[..., Awaitable[None]]:
    async def script(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await box.read_request(reader)
        writer.write(data)
        await writer.drain()
        if reset:  # RST instead of FIN
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return script


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("script", "kind"),
    [
        (hang_up_after(b"this is not http\r\n\r\n"), "ClientResponseError"),
        (hang_up_after(b""), "ServerDisconnectedError"),
        (hang_up_after(b"HTTP/1.1 200 OK\r\nContent-"), "ServerDisconnectedError"),
        (hang_up_after(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"a":'), "ClientPayloadError"),
        (hang_up_after(b"", reset=True), "ClientOSError"),
        (hang_up_after(ok(b"\x00\x01", "Content-Encoding: gzip")), "ClientPayloadError"),
        (hang_up_after(ok(b"{}", "Content-Encoding: br")), "ClientPayloadError"),
    ],
    ids=["garbage", "no-reply", "cut-head", "cut-body", "reset", "bad-gzip", "brotli"],
)
async def test_broken_replies_raise_aiohttps_names(script: Callable[..., Awaitable[None]], kind: str) -> None:
    async with server(script) as agent:
        pool = Pool(5)
        with pytest.raises(HttpError) as caught:
            await post(pool, agent.url)
        # The failed connection is dropped: the next request gets a fresh one.
        with pytest.raises(HttpError):
            await post(pool, agent.url)
        pool.close()
    assert caught.value.kind == kind
    assert agent.connections == 2


@pytest.mark.asyncio
async def test_connection_refused_is_a_connector_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(HttpError) as caught:
        await post(Pool(5), f"http://127.0.0.1:{port}")
    assert caught.value.kind == "ClientConnectorError"
    assert f"127.0.0.1:{port}" in str(caught.value)


@pytest.mark.asyncio
async def test_a_request_cut_off_by_its_timeout_leaves_no_connection_behind() -> None:
    """Its late reply would otherwise answer the next request sent on that connection."""

    async def slow(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in (b'{"late":1}', b'{"next":1}'):
            await box.read_request(reader)
            await asyncio.sleep(0.2)
            writer.write(ok(answer))
            await writer.drain()
        await reader.read()

    async with server(slow) as agent:
        pool = Pool(5)
        target = Target.of("POST", agent.url, "/run", {})
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await pool.request(target, b"{}")
        await asyncio.sleep(0.3)
        reply = await pool.request(target, b"{}")
        pool.close()
    assert reply.body == b'{"late":1}'  # a fresh connection's first reply
    assert agent.connections == 2


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate to serve TLS with")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.asyncio
async def test_https_verifies_the_agent_against_the_trust_store(
    self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    async with server(answering(ok(b'{"a":1}')), tls=tls) as agent:
        with pytest.raises(HttpError) as caught:
            await post(Pool(5), agent.url)
        assert caught.value.kind == "ClientConnectorCertificateError"
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        pool = Pool(5)
        reply = await post(pool, agent.url)
        pool.close()
    assert reply.body == b'{"a":1}'
