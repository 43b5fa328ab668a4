"""One blocking HTTP request from pytest's process, bounded as a whole.

``http.client`` and ``urllib`` time out per socket operation: a server that sends a
byte a second never trips that timeout, and would hold the session open long after
every rollout is done. A watchdog thread shuts the socket down once the deadline
passes, whatever the request is doing then (connecting, sending, reading), so the
blocked call returns at once and the request fails with ``RequestTimeout``.

Only for the few requests pytest's own process makes (``/aggregate_metrics``, the
head server's config); rollouts go through the dispatcher's own client.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pytest_rollouts.net.address import Address


class RequestTimeout(TimeoutError):
    """The whole request (connect, send, every byte of the reply) took longer than its bound."""


@contextmanager
def bounded_connection(address: Address, seconds: float) -> Iterator[http.client.HTTPConnection]:
    """A connection to ``address`` that fails with ``RequestTimeout`` once ``seconds`` have passed
    since it was opened; the request is made and its reply read inside the ``with``.

    The lock makes "finished" and "cut" exclusive: a cut after the ``with`` body returned changes
    nothing, and a cut before it is a ``RequestTimeout`` even if the body returned normally, since
    a reply read up to the close (no length given) parses when cut short.
    """
    kind = http.client.HTTPSConnection if address.tls else http.client.HTTPConnection
    # Each socket operation gets the whole bound too: connecting is the one step the watchdog
    # cannot cut (the socket is not the connection's until connect returns).
    connection = kind(address.host, address.port, timeout=seconds)
    lock = threading.Lock()
    state = {"finished": False, "cut": False}

    def cut() -> None:
        with lock:
            if state["finished"]:
                return
            state["cut"] = True
            sock = connection.sock
            if sock is not None:
                try:  # the plain socket's shutdown: an SSLSocket's would drop its TLS state under the reader
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

    watchdog = threading.Timer(seconds, cut)
    watchdog.daemon = True
    watchdog.start()
    message = f"no complete reply within {seconds:g}s"
    try:
        connection.connect()
        if state["cut"]:  # connected after the deadline, its socket out of the watchdog's reach
            raise RequestTimeout(message)
        yield connection
        with lock:
            state["finished"] = True
        if state["cut"]:  # a reply cut short may still have parsed (a body read to the close)
            raise RequestTimeout(message)
    except (OSError, http.client.HTTPException) as exc:
        if state["cut"] and not isinstance(exc, RequestTimeout):
            raise RequestTimeout(message) from None
        raise
    finally:
        watchdog.cancel()
        connection.close()
