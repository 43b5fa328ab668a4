"""A reply body's ``Content-Encoding`` undone: gzip and deflate, as aiohttp's client decodes them.

Apart from the client (``http1.py``), which asks only whether a coding is one of these and hands
the body over: what a server may send, and what comes of each, is this module's to say.
"""

from __future__ import annotations

import zlib

# How each coding's body is tried: deflate with the zlib wrapper, then raw as some servers send it.
DECODED = {
    "gzip": (16 + zlib.MAX_WBITS,),
    "x-gzip": (16 + zlib.MAX_WBITS,),
    "deflate": (zlib.MAX_WBITS, -zlib.MAX_WBITS),
}
# Codings a server may use that this client cannot decode; any other name is passed through as
# identity, as aiohttp does (``Content-Encoding: UTF-8`` is a common mistake).
UNDECODED = frozenset({"br", "zstd", "compress", "x-compress"})


class CodingError(ValueError):
    """A body its coding does not decode, or a coding this client does not decode."""


def is_coded(encoding: str) -> bool:
    """Whether a body of ``encoding`` (lower case) is decoded or refused, not passed through."""
    return encoding in DECODED or encoding in UNDECODED


def decoded(body: bytes, encoding: str, cut: int | None) -> bytes:
    """``cut``: an error reply's body is kept only to that many bytes (``error_limit``), so what its
    start decodes to is kept, as many bytes again at most, or the raw bytes when even that fails:
    its status says enough."""
    for wbits in DECODED.get(encoding, ()):
        try:
            if cut is None:
                return zlib.decompress(body, wbits)
            return zlib.decompressobj(wbits).decompress(body, cut)
        except zlib.error:
            continue
    if cut is not None:
        return body
    if encoding in DECODED:
        raise CodingError(f"the reply is not valid {encoding}")
    raise CodingError(f"the reply's Content-Encoding {encoding!r} is not supported")
