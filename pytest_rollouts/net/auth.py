"""Headers for agents behind a gateway, and keeping their values out of everything we write or show.

Values reach the dispatcher process over its stdin, never its command line (which
``ps`` shows), and anything an agent or gateway sends back is scrubbed of them before
it lands in an artifact or a message: a 401 page that echoes the key it refused, or a
debugging agent that echoes its request, must not leak it into files that get shared.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, overload

import orjson

from pytest_rollouts.store.jsonl import dumps

if TYPE_CHECKING:  # the dispatcher process imports this module and must not pay for pydantic
    from pytest_rollouts.config.agent_values import AgentHeader

REDACTED = "[redacted]"
# Shorter values would scrub ordinary words out of messages; no real credential is this short.
MIN_SECRET_CHARS = 8


def headers_for(headers: Iterable[AgentHeader], agent: str) -> dict[str, str]:
    """The headers ``agent`` gets: every unscoped one, then its own (which win on a shared name)."""
    chosen = {h.name: h.value.get_secret_value() for h in headers if h.agent is None}
    chosen.update({h.name: h.value.get_secret_value() for h in headers if h.agent == agent})
    return chosen


class Redactor:
    """Replaces every header value in a text; a no-op when no header is configured.

    A text is redacted whole before it is cut to size (``cut``, ``excerpt``): cut first, a
    value across the cut would keep its first characters.
    """

    def __init__(self, by_agent: Mapping[str, Mapping[str, str]]) -> None:
        # A value and, for "Bearer <token>" and the like, its credential alone: a gateway
        # that echoes what it refused usually echoes only the token.
        candidates = {
            part for h in by_agent.values() for v in h.values() for part in (v, *v.split()[-1:], *_basic_password(v))
        }
        values = {form for v in candidates if len(v) >= MIN_SECRET_CHARS for form in _echoed_forms(v)}
        # Longest first, so a value that contains another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)
        self._longest = len(self._values[0]) if self._values else 0
        # How each form reads inside a serialized row.
        self._needles = [orjson.dumps(value)[1:-1] for value in self._values]

    @overload
    def __call__(self, text: str) -> str: ...

    @overload
    def __call__(self, text: str | None) -> str | None: ...

    def __call__(self, text: str | None) -> str | None:
        if not text or not self._values:
            return text
        for value in self._values:
            text = text.replace(value, REDACTED)
        return text

    def cut(self, text: str, limit: int) -> str:
        """At most ``limit`` characters of ``text``, redacted before the cut."""
        return (self(text) or "")[:limit]

    def keep(self, limit: int) -> int:
        """How many bytes of a body to read or keep for ``excerpt``: enough that a value starting
        among its first ``limit`` characters is read whole, in its longest echoed form (UTF-8
        spends at most 4 bytes on a character)."""
        return 4 * (limit + self._longest)

    def excerpt(self, body: bytes, limit: int) -> str:
        """A reply body shown or stored in part: its first ``limit`` characters, redacted before the cut.

        A body of ``keep(limit)`` bytes or more is taken as cut short where it was read, which may
        have cut a value in two: what is left of it (its first characters, or bytes of one of its
        characters) is dropped. Past ``limit`` as a rule, but not when the values before it,
        redacted, got much shorter (a long value echoed many times).
        """
        kept = self.keep(limit)
        cut_short = len(body) >= kept
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = self(decoder.decode(body[:kept], final=not cut_short)) or ""
        if cut_short:
            text = text[: len(text) - self._started_at_end(text)]
        return text[:limit]

    def _started_at_end(self, text: str) -> int:
        """How many of ``text``'s last characters are the start of a value."""
        ends = (k for v in self._values for k in range(min(len(v) - 1, len(text)), 0, -1) if text.endswith(v[:k]))
        return max(ends, default=0)

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with every header value replaced in its strings and keys, e.g. in a reply that echoes it.

        Numbers stay as the agent sent them.
        """
        return self._scrub(row) if self._holds_secret(dumps(row)) else row

    def line(self, row: dict[str, Any]) -> bytes:
        """``row`` as the JSONL line to append, scrubbed like ``row``: serialized once when it holds no value.

        Every result row comes through here: with no header configured, it is only serialized."""
        data = dumps(row, option=orjson.OPT_APPEND_NEWLINE)
        if self._needles and self._holds_secret(data):
            data = dumps(self._scrub(row), option=orjson.OPT_APPEND_NEWLINE)
        return data

    def _holds_secret(self, data: bytes) -> bool:
        return any(needle in data for needle in self._needles)

    def _scrub(self, node: Any) -> Any:
        if isinstance(node, str):
            return self(node)
        if isinstance(node, dict):
            # A key is text like any other: an agent echoing its headers as an object writes them there.
            return {self._scrub(key): self._scrub(value) for key, value in node.items()}
        if isinstance(node, list):
            return [self._scrub(value) for value in node]
        return node


def _basic_password(value: str) -> tuple[str, ...]:
    """The password inside a ``Basic`` credential (a URL's ``user:password@`` becomes one), and
    ``user:password``: an agent that decodes it may echo it in clear."""
    scheme, _, encoded = value.partition(" ")
    if scheme.lower() != "basic":
        return ()
    try:
        pair = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ()
    return (pair, pair.partition(":")[2])


def _echoed_forms(value: str) -> set[str]:
    """``value`` as it can come back in text: raw, and as a JSON string's inside, the way an agent
    that echoes its request headers with ``json.dumps`` writes it (non-ASCII as ``\\uXXXX`` by
    default; quotes and backslashes escaped either way)."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
