"""The one HTTP/1.1 client to agents: ``/run`` and ``/health`` from the dispatcher, on kept-alive
connections, and (through ``net.blocking``) ``/aggregate_metrics`` and the head server's config.

Against a fast agent the dispatcher's CPU bounds the whole run, and aiohttp's client
spent most of it: 10k requests cost it 3.6-3.9 s of CPU, this client 1.0 s (same agent,
same loop). It does only what agents' endpoints need -- pooled connections, a fixed request
head, a body sent whole or streamed chunked, httptools' parser (llhttp, the parser Node.js
uses) for replies, chunked and read-until-close bodies, gzip/deflate -- and nothing a rollout does not: redirects are
not followed (an agent's ``/run`` does not move; see ``health.judge`` for ``/health``),
cookies are not kept (aiohttp's session kept them: a load balancer's affinity cookie is
no longer sent back), and proxy variables are not read (aiohttp did not read them either).

A request that gets no complete reply raises ``HttpError`` named as aiohttp names the
same failure (``ServerDisconnectedError``, ``ClientConnectorError``, ...): the sidecar's
``_ng_failure_type`` keeps the vocabulary of NeMo Gym's aiohttp-based collector.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping

import httptools

from pytest_rollouts.datatype import datatype
from pytest_rollouts.net.address import Address
from pytest_rollouts.net.codings import CodingError, decoded, is_coded

# A connection idle this long is not reused: servers close idle ones (uvicorn after 5 s), and a
# request sent on one the server is closing fails, though the agent never saw it.
KEEP_IDLE_S = 2.0
# Where a target's head ends: a body of known size follows its length, a streamed one is chunked.
LENGTH_FIELD = b"Content-Length: "
# A streamed body's head: what it asks of the server before any of it is sent, or not.
CHUNKED = b"Transfer-Encoding: chunked\r\n\r\n"
EXPECTING = b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
# A streamed body waits this long for the server's go-ahead (``100 Continue``) before it is sent
# anyway, as curl waits: a server that refuses it (a 404 where there is no such endpoint) answers
# before any of it is read from disk and sent. One that ignores the expectation costs the wait.
CONTINUE_WAIT_S = 1.0


class HttpError(Exception):
    """No complete reply; ``kind`` is aiohttp's name for the same failure."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@datatype(frozen=True, slots=True)
class Target:
    """Where one kind of request goes (an agent's ``/run``), and the head they all share up to Content-Length."""

    url: str
    host: str
    port: int
    tls: bool
    head: bytes

    @classmethod
    def of(cls, method: str, url: str, route: str, headers: Mapping[str, str]) -> Target:
        """``route`` (``/run``) joins ``url``'s path (see ``Address``)."""
        address = Address.parse(url, route)
        lines = [f"{method} {address.path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in address.headers(headers).items()]
        lines.append(LENGTH_FIELD.decode())
        return cls(address.shown, address.host, address.port, address.tls, "\r\n".join(lines).encode("latin-1"))

    @property
    def origin(self) -> tuple[str, int, bool]:
        return self.host, self.port, self.tls


@datatype(slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[bytes, bytes]  # names in lower case

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")


class _Connection(asyncio.Protocol):
    """One kept-alive connection; at most one request on it at a time (no pipelining)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        # What aiohttp's parser tolerates in replies, so do we: bare LF line ends, odd header
        # bytes, spaces after a chunk size. Agents are often quick servers, not strict ones.
        self._parser.set_dangerous_leniencies(
            lenient_headers=True, lenient_optional_cr_before_lf=True, lenient_spaces_after_chunk_size=True
        )
        self._waiter: asyncio.Future[Reply] | None = None
        self._body: list[bytes] = []
        self._kept = 0
        self._limit: int | None = None
        self._read_limit: int | None = None
        self._headers: dict[bytes, bytes] = {}
        self._status = 0
        self._headers_done = False
        self._until_close = False
        self._writable: asyncio.Future[None] | None = None
        # Set by a 100 Continue: the server wants the body it was told to expect.
        self._continue: asyncio.Future[None] | None = None
        self.reusable = False
        self.idle_since = 0.0

    # -- asyncio ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection's state is unknown
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # a 101 with Connection: Upgrade, after its status answered
            self._fail(HttpError("ClientResponseError", "the agent switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(HttpError("ClientResponseError", f"the agent's reply is not valid HTTP: {exc}"))

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.resume_writing()  # a streamed body stops at the reply's outcome, not at a full buffer
        if self._waiter is None or self._waiter.done():
            return
        if self._headers_done and self._until_close:  # the body ends where the connection does
            self._complete()
        elif isinstance(exc, OSError):
            self._fail(HttpError("ClientOSError", str(exc)))
        elif self._headers_done:
            self._fail(HttpError("ClientPayloadError", "Response payload is not completed"))
        else:
            self._fail(HttpError("ServerDisconnectedError", "Server disconnected"))

    # -- httptools ---------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._headers_done = True
        headers = self._headers
        self._until_close = (
            b"content-length" not in headers
            and b"chunked" not in headers.get(b"transfer-encoding", b"").lower()
            and self._status not in (204, 304)
        )

    def on_body(self, body: bytes) -> None:
        cap = self._cap
        if cap is None:
            self._body.append(body)
            return
        body = body[: max(0, cap - self._kept)]
        self._kept += len(body)
        if body:
            self._body.append(body)
        # Enough to show or judge, and the rest may never end: an error reply without a length
        # left open (a proxy's 502), or any reply under ``read_limit`` (a /health that streams).
        if self._kept >= cap and (self._until_close or cap == self._read_limit):
            self.reusable = False
            self._complete()

    @property
    def _cap(self) -> int | None:
        """How much of this reply's body is kept (None: all of it)."""
        if self._limit is not None and not 200 <= self._status < 300:
            return self._limit
        return self._read_limit

    def on_message_begin(self) -> None:
        if self._waiter is None:  # a reply nobody asked for, in the same read as the last one
            self.reusable = False

    def on_message_complete(self) -> None:
        if self._waiter is None:  # the end of a reply nobody asked for
            self.reusable = False
            return
        if 100 <= self._status < 200 and self._status != 101:  # interim (100 Continue): the reply follows
            self._headers, self._body, self._headers_done = {}, [], False
            if self._status == 100 and self._continue is not None and not self._continue.done():
                self._continue.set_result(None)
            return
        self.reusable = self._parser.should_keep_alive()
        self._complete()

    # -- requests ----------------------------------------------------------------------------

    def send(self, data: bytes, error_limit: int | None, read_limit: int | None) -> asyncio.Future[Reply]:
        """``error_limit``: how much of a non-2xx body to keep (the rest is read and dropped, unless
        it has no length); ``read_limit``: how much of any reply to read at all."""
        assert self._transport is not None
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._body, self._kept, self._limit, self._read_limit, self._headers = [], 0, error_limit, read_limit, {}
        self._headers_done = self._until_close = self.reusable = False
        if not self.alive:  # a write to a lost connection is dropped silently: no reply would come
            self._fail(HttpError("ServerDisconnectedError", "Server disconnected"))
        else:
            self._transport.write(data)
        return waiter

    async def stream(self, chunks: Iterable[bytes], waiter: asyncio.Future[Reply], expect: bool) -> bool:
        """Send ``chunks`` as a chunked body, each once the transport has room for it, until the
        reply is settled: a server that answers before reading the body (404 where it has no such
        endpoint, 401, 413) will not read the rest, and sending it anyway costs seconds at 100k rows.
        With ``expect`` (the head said ``Expect: 100-continue``), none goes before the server's
        ``100 Continue``, its reply, or ``CONTINUE_WAIT_S``. True once the body was begun (a piece
        taken, or the end of an empty one sent): a 417 after that cannot be asked again without it."""
        assert self._transport is not None
        pieces, taken = iter(chunks), False
        try:
            if expect:
                self._continue = asyncio.get_running_loop().create_future()
                await asyncio.wait(
                    (self._continue, waiter), timeout=CONTINUE_WAIT_S, return_when=asyncio.FIRST_COMPLETED
                )
                self._continue = None
            # Settled first, then the next piece taken: a refusal reads none of them from disk.
            while not waiter.done() and self.alive:
                chunk, taken = next(pieces, None), True
                if chunk is None:
                    self._transport.write(b"0\r\n\r\n")
                    return taken
                if chunk:
                    self._transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                await (self._writable if self._writable is not None else asyncio.sleep(0))
        except BaseException:  # cancelled (its deadline), or the pieces failed: no one awaits the reply now
            self._continue = None
            waiter.cancel()
            raise
        self.reusable = False  # the body was cut short: what the server reads next on it is unknown
        return taken

    @property
    def alive(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def close(self) -> None:
        self.reusable = False
        if self._transport is not None:
            self._transport.abort()

    def _complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        body = b"".join(self._body)
        self._body = []
        encoding = self._headers.get(b"content-encoding", b"").strip().lower().decode("latin-1")
        if body and is_coded(encoding):
            try:
                body = decoded(body, encoding, self._cap)
            except CodingError as exc:
                waiter.set_exception(HttpError("ClientPayloadError", str(exc)))
                return
            except Exception as exc:  # MemoryError from a bomb: the waiter must still be answered
                waiter.set_exception(HttpError("ClientPayloadError", f"cannot decode the reply: {exc!r}"))
                return
        waiter.set_result(Reply(self._status, body, self._headers))

    def _fail(self, exc: HttpError) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


class Pool:
    """Kept-alive connections by origin; as many as requests in flight, which the caller bounds."""

    def __init__(self, connect_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._idle: defaultdict[tuple[str, int, bool], list[_Connection]] = defaultdict(list)
        self._open: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None

    async def request(
        self,
        target: Target,
        body: bytes | Iterable[bytes] = b"",
        error_limit: int | None = None,
        read_limit: int | None = None,
        *,
        expect: bool = True,
    ) -> Reply:
        """One request on a kept-alive connection; limits as ``_Connection.send`` takes them. A
        ``body`` of pieces is streamed chunked (``/aggregate_metrics`` reads rows from disk as sent),
        with ``Expect: 100-continue`` unless the server refused it (417): then asked again without."""
        connection = self._idle_connection(target) or await self._connect(target)
        taken = False  # a piece of a streamed body
        try:
            if isinstance(body, bytes):
                data = b"".join((target.head, str(len(body)).encode(), b"\r\n\r\n", body))  # one copy of the body
                reply = await connection.send(data, error_limit, read_limit)
            else:
                head = target.head.removesuffix(LENGTH_FIELD) + (EXPECTING if expect else CHUNKED)
                waiter = connection.send(head, error_limit, read_limit)
                taken = await connection.stream(body, waiter, expect)
                reply = await waiter
        except BaseException:  # cancelled or timed out mid-reply: what comes next on it is unknown
            connection.close()
            self._open.discard(connection)
            raise
        if connection.reusable and connection.alive:
            connection.idle_since = time.monotonic()
            self._idle[target.origin].append(connection)
        else:
            connection.close()
            self._open.discard(connection)
        if reply.status == 417 and expect and not isinstance(body, bytes) and not taken:
            # RFC 9110: a server that refuses the expectation gets the request again without it.
            return await self.request(target, body, error_limit, read_limit, expect=False)
        return reply

    def close(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()

    def _idle_connection(self, target: Target) -> _Connection | None:
        """The most recently used live one; dead or stale ones met on the way are closed."""
        idle = self._idle.get(target.origin)
        fresh_after = time.monotonic() - KEEP_IDLE_S
        while idle:
            connection = idle.pop()
            if connection.alive and connection.idle_since >= fresh_after:
                return connection
            connection.close()
            self._open.discard(connection)
        return None

    async def _connect(self, target: Target) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if target.tls else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(
                    _Connection, target.host, target.port, ssl=tls, server_hostname=target.host if tls else None
                )
        except TimeoutError:
            raise HttpError(
                "ConnectionTimeoutError",
                f"Connection timeout to host {target.host}:{target.port} after {self._connect_timeout:g}s",
            ) from None
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host the resolver cannot encode
            kind = "ClientConnectorError"
            if isinstance(exc, ssl.SSLCertVerificationError):
                kind = "ClientConnectorCertificateError"
            elif isinstance(exc, ssl.SSLError):
                kind = "ClientConnectorSSLError"
            where = f"{target.host}:{target.port} ssl:{'default' if tls else 'False'}"
            raise HttpError(kind, f"Cannot connect to host {where} [{getattr(exc, 'strerror', None) or exc}]") from None
        self._open.add(connection)
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        """The system's trust store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` point it elsewhere), made once."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls
