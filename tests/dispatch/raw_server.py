"""Raw servers on 127.0.0.1 that answer byte for byte as a script says (aiohttp's server would
always answer well-formed HTTP): the HTTP/1.1 client's and the transport's tests use them."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """Counts connections and keeps every request head it read."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
            0,
        )
        return await reader.readexactly(length)


@asynccontextmanager
async def server(
    script: Callable[[Server, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[Server]:
    box = Server(lambda r, w: script(box, r, w))
    listener = await asyncio.start_server(box.serve, "127.0.0.1", 0, ssl=tls)
    box.url = f"{'https' if tls else 'http'}://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    try:
        yield box
    finally:
        listener.close()


def answering(*replies: bytes, then_close: bool = False) -> Callable[..., Awaitable[None]]:
    """Answers each request on a connection with the next reply, keeping the connection open."""

    async def script(box: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            await box.read_request(reader)
            writer.write(reply)
            await writer.drain()
        if not then_close:
            await reader.read()

    return script
