"""Health checks before dispatch: ``GET /health`` on every agent the plan routes to.

A dead agent would otherwise turn every one of its rollouts into an
``agent_request_failed`` row after the retries; checking first stops the session
before any ``/run`` with one message that names the agent, its address and its reply.
A pytest session's checks run in its dispatcher process, which has the HTTP client and an
event loop loaded already: pytest asks it before it sends the plan (``CheckHealth``), so its own
process loads neither. The Python API checks on the caller's loop. Either way in parallel up to
``--rollouts-health-workers``, before any file is moved.

A reply is judged by ``judge``: a 2xx is healthy unless its JSON body reports a
failing ``status`` or failing named ``checks`` that are not ignored; a 404 means the
server accepts connections but has no such route, which counts as healthy, and so does
a redirect (``/health`` to ``/health/``: the client follows none). An ignored
CHECK is one of those names, or an agent's name: that agent is not checked at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson

from pytest_rollouts.config.bounds import HEALTH_CHECK_S
from pytest_rollouts.datatype import datatype
from pytest_rollouts.net.address import Address
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import HttpError, Pool, Target

HEALTH_PATH = "/health"
HEALTHY_WORDS = frozenset({"ok", "healthy", "pass", "passed", "up", "ready", "true"})
SHOWN_BODY_CHARS = 300
# A reply listing many checks must be read whole to be judged; only its start is shown.
MAX_JUDGED_BYTES = 64 * 1024


@datatype(frozen=True)
class Unhealthy:
    """One agent that failed its check: what the user needs to go and fix it."""

    agent: str
    url: str
    reply: str

    def line(self) -> str:
        return f"agent {self.agent!r} at {self.url}: {self.reply}"


def refusal_text(lines: Sequence[str], nothing: str, turn_off: str) -> str:
    """What a door says when agents fail their check: one line per agent, and how to turn the
    check off in that door's own names (an option, a keyword argument)."""
    shown = "\n".join(f"  {line}" for line in lines)
    return f"agents failed their health check; {nothing}:\n{shown}\n{turn_off}"


def judge(status: int, body: bytes, ignored: Collection[str], redact: Redactor) -> str | None:
    """Why a ``/health`` reply is unhealthy, or None when it is healthy."""
    if status == 404 or 300 <= status < 400:
        return None
    shown = redact.excerpt(body, SHOWN_BODY_CHARS)
    if not 200 <= status < 300:
        return f"HTTP {status}" + (f": {shown}" if shown else "")
    failing = _failing_checks(body)
    unignored = [name for name in failing if name not in ignored]
    if unignored:
        return f"failing checks {', '.join(unignored)}: {shown}"
    return None


def _failing_checks(body: bytes) -> list[str]:
    """Named checks a JSON body reports as failing; ``status`` is the check called ``status``."""
    try:
        reply = orjson.loads(body) if body.strip() else None
    except orjson.JSONDecodeError:
        return []
    if not isinstance(reply, dict):
        return []
    failing = []
    if "status" in reply and not _healthy(reply["status"]):
        failing.append("status")
    checks = reply.get("checks")
    if isinstance(checks, dict):
        for name, result in checks.items():
            value = result.get("status") if isinstance(result, dict) else result
            if not _healthy(value):
                failing.append(str(name))
    return failing


def _healthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in HEALTHY_WORDS


async def check_agents(
    pool: Pool,
    urls: Mapping[str, str],
    headers: Mapping[str, Mapping[str, str]],
    *,
    workers: int,
    ignored: Collection[str],
    redact: Redactor,
) -> list[Unhealthy]:
    """Check every agent in ``urls``, at most ``workers`` at once; the unhealthy ones, by name."""
    gate = asyncio.Semaphore(workers)

    async def one(name: str, url: str) -> Unhealthy | None:
        async with gate:
            target = Target.of("GET", url, HEALTH_PATH, headers.get(name, {}))
            why = await _check(pool, target, ignored, redact)
        return None if why is None else Unhealthy(name, Address.parse(url).shown, redact(why) or "")

    checked = sorted((name, url) for name, url in urls.items() if name not in ignored)
    results = await asyncio.gather(*(one(name, url) for name, url in checked))
    return [r for r in results if r is not None]


async def _check(pool: Pool, target: Target, ignored: Collection[str], redact: Redactor) -> str | None:
    try:
        async with asyncio.timeout(HEALTH_CHECK_S):
            reply = await pool.request(target, read_limit=MAX_JUDGED_BYTES)
    except TimeoutError:
        return f"no reply within {HEALTH_CHECK_S:g}s"
    except HttpError as exc:
        return f"{exc.kind}: {exc}"
    return judge(reply.status, reply.body, ignored, redact)
