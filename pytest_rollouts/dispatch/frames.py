"""Length-prefixed frames between pytest and its dispatcher process.

A frame is a 4-byte big-endian length and a payload: a message (``messages.py``) or
the raw bytes of one of the plan's integer columns. Kept free of heavy imports: pytest's side uses it too.
"""

from __future__ import annotations

import os
import select
import struct
import time
from collections import deque
from typing import BinaryIO

_LENGTH = struct.Struct(">I")
READ_BYTES = 1 << 16
# poll takes milliseconds in a C int (about 24.8 days): a longer wait goes in steps of this.
POLL_STEP_S = 60.0


class ChannelClosed(EOFError):
    """The other side went away."""


class ChannelStuck(ChannelClosed):
    """The other side stopped taking what is written to it (stopped, or blocked in the kernel)."""


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def write_all(fd: int, data: bytes, limit_s: float | None = None) -> None:
    """Write all of ``data``; with ``limit_s``, fail once the reader took nothing for that long.

    A blocking write into a full pipe waits for the reader with no bound at all: a reader that
    is stopped or still starting up would hold the writer for ever. So the descriptor is made
    non-blocking and each wait for room is a poll with a deadline (a signal still interrupts it).
    """
    view = memoryview(data)
    if limit_s is None:
        while view:
            view = view[os.write(fd, view) :]
        return
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
                continue
            except BlockingIOError:
                pass
            waited = time.monotonic()
            if not poller.poll(limit_s * 1000) and time.monotonic() - waited >= limit_s:
                raise ChannelStuck(f"the other side took nothing for {limit_s:.0f} s")
    finally:
        os.set_blocking(fd, True)


def read_frame(stream: BinaryIO) -> bytes:
    head = _read_exactly(stream, _LENGTH.size)
    return _read_exactly(stream, _LENGTH.unpack(head)[0])


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    """Pipes deliver short reads; keep reading until ``size`` bytes or end of input."""
    chunks = []
    while size:
        data = stream.read(size)
        if not data:
            raise ChannelClosed("the dispatcher channel closed")
        chunks.append(data)
        size -= len(data)
    return b"".join(chunks)


def next_frame(fd: int, frames: FrameBuffer, inbox: deque[bytes], deadline: float) -> bytes:
    """The next frame of ``fd``: the first one ``inbox`` holds, or read (the frames after it go to
    ``inbox``); ``TimeoutError`` at ``deadline`` (``time.monotonic``), ``ChannelClosed`` at its end.

    Waits by ``poll``, not ``select``: a caller may hold descriptors past 1024 (a trainer with
    many files open), which ``select`` refuses."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while not inbox:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        if poller.poll(min(left, POLL_STEP_S) * 1000):
            inbox.extend(frames.read(fd))
    return inbox.popleft()


class FrameBuffer:
    """Splits a byte stream that arrives in arbitrary chunks back into frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def read(self, fd: int) -> list[bytes]:
        """One read of ``fd`` (what is there, up to ``READ_BYTES``), and the frames it completes;
        ``ChannelClosed`` at the end of its input."""
        data = os.read(fd, READ_BYTES)
        if not data:
            raise ChannelClosed("the dispatcher channel closed")
        return self.feed(data)

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= _LENGTH.size:
            size = _LENGTH.unpack_from(self._buffer)[0]
            end = _LENGTH.size + size
            if len(self._buffer) < end:
                break
            frames.append(bytes(self._buffer[_LENGTH.size : end]))
            del self._buffer[:end]
        return frames
