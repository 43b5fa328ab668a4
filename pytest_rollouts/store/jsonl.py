"""Reading and appending JSONL, and the one JSON decoder (``loads``) and encoder (``dumps``) for row data.

Readers name file and line on every malformed line, because a user staring at a
100k-line dataset needs to know where to look, not just that something is wrong.

Rows must come back as NeMo Gym's collector (Python's ``json``) keeps them: ``NaN`` and
``Infinity`` (``json.dumps`` writes them; -inf logprobs are common) and integers of any
size. orjson refuses the first and turns integers beyond 64 bits into floats, so the
rare row that has either goes through ``json`` instead; every other row keeps orjson's
speed. Messages between our own processes (``frames.py``) stay plain orjson.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import orjson


class JsonlError(ValueError):
    """A line that is not a JSON object; the message starts with ``path:line``."""


class ArtifactError(OSError):
    """An artifact can no longer be written where it belongs (disk full, file removed): every row
    from here on would be lost, so whoever writes must stop."""


@contextmanager
def replaced_atomically(path: Path) -> Iterator[BinaryIO]:
    """Write ``path`` through a private file renamed into place once written and fsynced: a reader
    (or another xdist worker writing the same file) sees the old file or the whole new one.

    A failed write leaves neither a partial file nor the private one, and says which file: the
    one written, or the one the body could not read for it (a shard, the outputs).
    """
    private = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with open(private, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(private, path)
    except BaseException as exc:
        private.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, ArtifactError):
            if exc.filename not in (None, str(private), str(path)):  # the body's own reading failed
                raise ArtifactError(f"cannot read {exc.filename} to write {path}: {exc.strerror or exc}") from exc
            raise ArtifactError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


class NonFinite(float):
    """``NaN`` or an infinity read from JSON. orjson writes a plain float NaN as ``null``; this type
    reaches ``dumps``' ``default``, which writes it back as ``json.dumps`` does (``null`` in strict
    JSON). Code that computes a non-finite value to be written (the metrics) makes it one of these too."""

    __slots__ = ()


_NAN, _INFINITY, _MINUS_INFINITY = orjson.Fragment(b"NaN"), orjson.Fragment(b"Infinity"), orjson.Fragment(b"-Infinity")
# orjson keeps an integer exact only within 64 bits (-2**63 to 2**64 - 1): a number of 19 digits
# or more goes to ``json``. Found by turning every digit into 0 and looking for 19 in a row: about
# 0.4 us on a 150-byte reply and 5 us on a 2.7 kB one, against orjson's 1.3 and 20 us to parse
# them (a regex for it takes longer than the parse itself).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19
# A surrogate's escape, one of a pair or alone (a pair ``json`` joins into one character).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# A character no UTF-8 text holds: a lone surrogate, as Python keeps a byte the OS handed over that
# is not UTF-8 (``\xff`` in an argument or a file name is ``\udcff``), or half an emoji's escape.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def loads(raw: bytes) -> Any:
    """``raw`` decoded as Python's ``json`` decodes it (NaN, infinities and big integers kept, each
    non-finite float a ``NonFinite``), by orjson unless it would refuse or round; ``ValueError`` if
    it is not JSON (with orjson's message, which names the place)."""
    if _LONG_NUMBER in raw.translate(_DIGITS_AS_ZERO):
        return _exact(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as refused:
        try:
            return _exact(raw)
        except ValueError:
            raise refused from None


def _exact(raw: bytes) -> Any:
    """``raw`` by Python's ``json``. Nested deeper than it recurses (orjson stops at 1024 levels
    too), a value was a ``RecursionError``: a traceback where a bad row or reply is named."""
    try:
        value = json.loads(raw, parse_constant=NonFinite, parse_float=_float)
    except RecursionError:
        raise ValueError("nested too deeply (arrays or objects more than about 1000 levels in)") from None
    return _whole_characters(value) if _SURROGATE_ESCAPE.search(raw) else value


def _whole_characters(node: Any) -> Any:
    """``node`` with each lone surrogate (``"\\ud83d"``: half an emoji, which ``json`` reads and
    orjson refuses) made U+FFFD, the character a UTF-8 decoder puts for bytes it cannot read.
    No UTF-8 file, terminal or page can hold a lone surrogate, nor orjson write one: kept, it would
    break every later reader of what the run accepted (messages, the report, the metrics file)."""
    if isinstance(node, str):
        return LONE_SURROGATE.sub("\ufffd", node)
    if isinstance(node, dict):
        return {_whole_characters(key): _whole_characters(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_whole_characters(value) for value in node]
    return node


def _float(text: str) -> float:
    value = float(text)
    return NonFinite(value) if math.isinf(value) else value  # 1e400, as json reads it


def dumps(value: Any, *, option: int = 0, default: Callable[[Any], Any] | None = None, strict: bool = False) -> bytes:
    """``value`` as JSON: orjson's bytes, ``NonFinite`` values as ``json.dumps`` writes them, and a
    value orjson cannot write (an integer beyond 64 bits) by ``json`` instead. ``option``: orjson's
    (only ``OPT_APPEND_NEWLINE`` is kept on the ``json`` path); ``default`` as orjson's.

    ``strict``: strict JSON, every non-finite number ``null``, for a file any JSON reader must take
    (the metrics file: ``jq``, JavaScript, a dashboard), where rows keep what Python's ``json`` wrote."""
    fragment = _null if strict else _fragment
    try:
        return orjson.dumps(value, default=fragment if default is None else _then(default, fragment), option=option)
    except TypeError as refused:
        try:
            text = json.dumps(_nulled(value) if strict else value, default=default, separators=(",", ":"))
        except (TypeError, ValueError):
            raise refused from None
        return text.encode() + (b"\n" if option & orjson.OPT_APPEND_NEWLINE else b"")


def _fragment(value: Any) -> orjson.Fragment | float:
    if isinstance(value, NonFinite):
        if math.isfinite(value):
            return float(value)
        return _NAN if math.isnan(value) else _INFINITY if value > 0 else _MINUS_INFINITY
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _null(value: Any) -> float | None:
    if isinstance(value, NonFinite):
        return float(value) if math.isfinite(value) else None
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _nulled(node: Any) -> Any:
    """``node`` with each non-finite float ``None``, for ``json`` (which writes them as ``NaN``)."""
    if isinstance(node, float):
        return node if math.isfinite(node) else None
    if isinstance(node, dict):
        return {key: _nulled(value) for key, value in node.items()}
    if isinstance(node, list | tuple):
        return [_nulled(value) for value in node]
    return node


def _then(default: Callable[[Any], Any], fragment: Callable[[Any], Any] = _fragment) -> Callable[[Any], Any]:
    return lambda value: fragment(value) if isinstance(value, NonFinite) else default(value)


def object_from(raw: bytes) -> dict[str, Any]:
    """One JSON object, or ``ValueError`` saying why not."""
    try:
        value = loads(raw)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def parse_object(raw: bytes, path: Path, line_no: int) -> dict[str, Any]:
    try:
        return object_from(raw)
    except ValueError as exc:
        raise JsonlError(f"{path}:{line_no}: {exc}") from None


def scan_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(line_no, byte_offset, line)`` for each non-blank line, 1-based line numbers."""
    offset = 0
    with open(path, "rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            if line.strip():
                yield line_no, offset, line
            offset += len(line)


def whole_lines(path: Path, offset: int, budget: int = -1) -> bytes:
    """The whole lines of a file others are appending to, from ``offset`` on: about ``budget``
    bytes of them (all when negative), never a line still being written. ``b""`` if no file."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(budget)
            if budget >= 0 and not data.endswith(b"\n"):
                data += handle.readline()  # the rest of a line the budget cut
    except FileNotFoundError:
        return b""
    return data[: data.rfind(b"\n") + 1]


class LineReader:
    """Reads single lines by byte offset from several files, keeping each file open once."""

    def __init__(self) -> None:
        self._handles: dict[Path, BinaryIO] = {}

    def read(self, path: Path, offset: int) -> bytes:
        handle = self._handles.get(path)
        if handle is None:
            handle = self._handles[path] = open(path, "rb")
        handle.seek(offset)
        return handle.readline()

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles.values():
            handle.close()


def check_in_place(fd: int, path: Path, use: str) -> None:
    """``ArtifactError`` unless ``path`` is still the file open as ``fd``: one removed or replaced
    while the run was ``use``-ing it no longer holds what the run wrote, or what it sends."""
    mine = os.fstat(fd)
    try:
        there = os.stat(path)
    except FileNotFoundError:
        there = None
    if there is None or (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
        raise ArtifactError(f"{path} was removed or replaced while the run was {use} it")


class JsonlAppender:
    """Append-only JSONL file: every row goes out in one ``write`` so lines are never interleaved.

    ``O_APPEND`` plus a single unbuffered write per row keeps each line whole even
    when several processes append to the same file, and means a row is in the
    kernel the moment ``append`` returns; ``sync`` makes it durable.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.path = path
        self._fd = os.open(path, flags, 0o644)
        self._dirty = False
        self._lock = threading.Lock()

    def append(self, row: dict[str, Any]) -> None:
        self.append_line(dumps(row, option=orjson.OPT_APPEND_NEWLINE))

    def append_line(self, line: bytes) -> None:
        """One already-serialized row, newline included."""
        data = memoryview(line)
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as exc:
            raise ArtifactError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self._dirty = True

    def sync(self) -> None:
        """Called from a worker thread once a second, and by ``close``: hence the lock."""
        with self._lock:
            if self._fd < 0:
                return
            self._check_in_place()
            if self._dirty:
                self._dirty = False
                try:
                    os.fsync(self._fd)
                except OSError as exc:
                    raise ArtifactError(f"cannot write {self.path}: {exc.strerror or exc}") from exc

    def _check_in_place(self) -> None:
        """Rows written after the file was removed or replaced reach no file anyone will read."""
        check_in_place(self._fd, self.path, "writing")

    def close(self) -> None:
        try:
            self.sync()
        finally:
            with self._lock:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
