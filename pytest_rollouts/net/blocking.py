"""One HTTP request bounded as a whole: ``/aggregate_metrics`` and the head server's config, from
synchronous code (``request``: the Python API, the ``aggregate`` command) or the dispatcher process
(``bounded``: a pytest session's ``/aggregate_metrics``, ``dispatch/metrics_relay.py``).

It is the dispatcher's client (``http1``), so the requests to agents share
one parser, one TLS setup and one vocabulary of failures. The deadline covers the whole request
(connect, send, every byte of the reply): a server that sends a byte a second never trips a
per-read timeout, and would hold the session open long after every rollout is done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_rollouts.net.http1 import Reply


class RequestError(Exception):
    """No complete reply; the message says why, and names no URL (the caller knows which it asked)."""


class RequestTimeout(RequestError, TimeoutError):
    """The whole request (connect, send, every byte of the reply) took longer than its bound."""


class RequestFailed(RequestError):
    """Refused, reset, or a reply that is not HTTP."""


def request(
    method: str,
    url: str,
    route: str,
    headers: Mapping[str, str],
    body: bytes | Iterable[bytes] = b"",
    *,
    timeout: float,
) -> Reply:
    """``bounded`` on a private event loop, to the end of the request. Must not be called from a
    running event loop.

    asyncio and httptools are imported here, on a process's first such request: a pytest session
    has its dispatcher process send ``/aggregate_metrics``, and loads them only for a head server.
    """
    import asyncio

    # Its own loop, never made the thread's current one: whatever loop the caller had set stays set.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(bounded(method, url, route, headers, body, timeout=timeout))


async def bounded(
    method: str,
    url: str,
    route: str,
    headers: Mapping[str, str],
    body: bytes | Iterable[bytes] = b"",
    *,
    timeout: float,
) -> Reply:
    """``method`` ``route`` (joined to ``url``'s path) with ``headers`` and the URL's credentials,
    on a connection of its own; pieces of a ``body`` are streamed chunked. Raises ``RequestTimeout``
    past ``timeout`` seconds, ``RequestFailed`` without a reply."""
    import asyncio

    from pytest_rollouts.net.http1 import HttpError, Pool, Target

    # The connect timeout never fires first: the whole request's bound starts earlier.
    pool = Pool(connect_timeout=timeout)
    try:
        async with asyncio.timeout(timeout):
            return await pool.request(Target.of(method, url, route, headers), body)
    except TimeoutError:
        raise RequestTimeout(f"no complete reply within {timeout:g}s") from None
    except HttpError as exc:
        raise RequestFailed(str(exc) or exc.kind) from None
    finally:
        pool.close()
