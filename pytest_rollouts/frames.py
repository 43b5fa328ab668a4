"""Length-prefixed frames between pytest and its dispatcher process.

A frame is a 4-byte big-endian length and a payload: orjson for messages, raw bytes
for the plan's integer columns. Kept free of heavy imports: pytest's side uses it too.
"""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO

import orjson

_LENGTH = struct.Struct(">I")


class ChannelClosed(EOFError):
    """The other side went away."""


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def message(value: Any) -> bytes:
    return frame(orjson.dumps(value))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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


class FrameBuffer:
    """Splits a byte stream that arrives in arbitrary chunks back into frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

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
