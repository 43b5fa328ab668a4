"""An agent's URL as HTTP requests need it: one reading for ``/health``, ``/run`` and ``/aggregate_metrics``.

Kept apart from ``http1.py`` so pytest's process (settings, scoring) reads URLs without
importing the dispatcher's parser.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from urllib.parse import quote, unquote, urlsplit

from pytest_rollouts.datatype import datatype

# What a path or query keeps as is: RFC 3986's reserved and unreserved characters and ``%``
# (an escape already made stays one).
PATH_SAFE = "/%:@!$&'()*+,;=-._~"
QUERY_SAFE = PATH_SAFE + "?"
LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


@datatype(slots=True)
class Address:
    """An agent's URL as a request needs it, made the way aiohttp made it: a non-ASCII path
    percent-encoded, a non-ASCII host IDNA-encoded (UTS 46, as yarl does), ``user:password@`` sent
    as Basic auth (unless an Authorization header is given; UTF-8, as RFC 7617 asks). ``shown`` is
    the URL for messages, without the password.

    A route (``/run``) joins the URL's path, ahead of its query: a gateway's ``?key=...`` reaches
    every endpoint (appended to the URL as text, it would have joined the query instead)."""

    shown: str
    host: str
    port: int
    tls: bool
    path: str
    netloc: str
    authorization: str | None

    @classmethod
    def parse(cls, url: str, route: str = "") -> Address:
        parts = urlsplit(url)
        parts = parts._replace(path=parts.path.rstrip("/") + route, fragment="")
        tls = parts.scheme == "https"
        host = ascii_host(parts.hostname or "")
        port = parts.port or (443 if tls else 80)
        path = _quoted(parts.path or "/", PATH_SAFE)
        if parts.query:
            path += "?" + _quoted(parts.query, QUERY_SAFE)
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{port}"
        authorization = None
        if parts.username is not None:
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            authorization = f"Basic {base64.b64encode(credentials).decode('ascii')}"
        return cls(without_password(parts.geturl()), host, port, tls, path, netloc, authorization)

    def with_credentials(self, given: Mapping[str, str]) -> dict[str, str]:
        """``given`` and, unless it has one, the URL's credentials as an Authorization header: the
        headers an agent gets, and the secrets the redactor must know."""
        if self.authorization is None or any(name.lower() == "authorization" for name in given):
            return dict(given)
        return {"Authorization": self.authorization, **given}

    def headers(self, given: Mapping[str, str]) -> dict[str, str]:
        """What a request sends: Host, then ``given`` with the URL's credentials (but Content-Length,
        the sender's to set)."""
        headers = {} if any(name.lower() == "host" for name in given) else {"Host": self.netloc}
        headers.update(
            (name, value) for name, value in self.with_credentials(given).items() if name.lower() != "content-length"
        )
        return headers


def ascii_host(host: str) -> str:
    """``host`` as DNS and a Host header take it; a ``ValueError`` (``UnicodeError``) when it has none,
    an ASCII one included (``example..com``: the resolver would raise it mid-run)."""
    if host.isascii():
        _check_labels(host)
        return host
    import idna  # yarl's dependency, and aiohttp's through it: only for the rare non-ASCII host

    return idna.encode(host, uts46=True).decode("ascii")


def _check_labels(host: str) -> None:
    """What the IDNA codec checks of an ASCII host (``encodings.idna``'s fast path): each label but a
    trailing empty one is 1 to 63 characters. Written out, as loading the codec (``unicodedata`` and
    ``stringprep`` with it) cost each process that read a URL, pytest's at every start."""
    labels = host.split(".")
    if any(not 0 < len(label) < 64 for label in labels[:-1]):
        raise UnicodeError("label empty or too long")
    if len(labels[-1]) >= 64:
        raise UnicodeError("label too long")


def _quoted(text: str, safe: str) -> str:
    """``text`` percent-encoded where needed: an escape already made stays one, a lone ``%``
    (``?q=50%off``) becomes ``%25``, as yarl makes it."""
    return quote(LONE_PERCENT.sub("%25", text), safe=safe)


def without_password(text: str) -> str:
    """``text``, a URL or an option value that holds one (``judge=http://u:pw@host``), fit for a
    message: what lies between ``://`` and the last ``@`` left out.

    Read as text, not parsed, so it holds whatever the shape: a malformed URL
    (``http://u:pw@[::1``, which the parser refuses with an error) and a password holding a
    ``/`` or ``?`` (which the parser reads as a path or query) are the user's mistakes to be
    told about, their passwords hidden all the same. Hidden past the host's place, the
    ``@`` stays as ``***@``, so the message does not name a host the URL does not have."""
    head, sep, rest = text.partition("://")
    hidden, at, tail = rest.rpartition("@")
    if not (sep and at):
        return text
    return head + sep + ("***@" if any(c in hidden for c in "/?#") else "") + tail
