"""The dispatcher process's ends of its two pipes to pytest, as asyncio protocols.

Whatever ends pytest ends the run: its input closing (pytest died or closed it) and its
output going away (pytest killed) both close the engine, so nothing is left running.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from pytest_rollouts.dispatch.frames import FrameBuffer


class Receiver(Protocol):
    """What the pipes tell the engine."""

    def handle(self, raw: bytes) -> None: ...

    def crash(self, exc: BaseException) -> None: ...

    def input_closed(self) -> None: ...


class Input(asyncio.Protocol):
    """pytest's messages, split back into frames and handed on one by one to ``receiver`` (the
    engine, then once it closed the metrics relay)."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.closed = False
        self._frames = FrameBuffer()

    def data_received(self, data: bytes) -> None:
        try:
            for raw in self._frames.feed(data):
                self.receiver.handle(raw)
        except Exception as exc:
            self.receiver.crash(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.receiver.input_closed()


class Output(asyncio.Protocol):
    """pytest's end of the pipe. Once pytest is gone (killed, its pipe closed), what the engine
    would tell it is dropped, not raised as a bug, and the run closes: nobody waits for it."""

    def __init__(self) -> None:
        self.receiver: Receiver | None = None
        self.closed = False
        self._transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.receiver is not None:
            self.receiver.input_closed()

    def send(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
