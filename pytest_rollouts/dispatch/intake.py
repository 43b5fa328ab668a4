"""What the dispatcher process reads before it dispatches: the agents' health asked, then the plan.

pytest clears its agents before it moves any file, and asks this process to check their health
(``CheckHealth``, answered ``HealthChecked``), which has the event loop and the HTTP client loaded
already; then it sends the plan, a ``PlanHeader`` and its columns (``messages.py``).
"""

from __future__ import annotations

from array import array
from typing import Any

from pytest_rollouts.dispatch.agents import PlanAgents
from pytest_rollouts.dispatch.frames import ChannelClosed, read_frame, write_all
from pytest_rollouts.dispatch.messages import (
    CheckHealth,
    HealthChecked,
    MessageError,
    PlanHeader,
    decode,
    decode_column,
    encode,
    resolve,
)
from pytest_rollouts.rows.planned import COLUMNS


async def read_plan(stdin: Any, stdout: Any) -> tuple[PlanHeader, dict[str, array]] | None:
    """The header and the plan's columns, each health check asked before them answered; None when
    pytest closed the pipe first (it dispatched nothing, or was stopped or killed while the agents
    were checked or the plan sent). ``MessageError`` for a message out of place."""
    # Before the first read, which waits for pytest: the types of what it reads and answers from here on.
    resolve()
    try:
        while isinstance(header := decode(read_frame(stdin)), CheckHealth):
            unhealthy = await PlanAgents.of(header.header).unhealthy_lines()
            write_all(stdout.fileno(), encode(HealthChecked(unhealthy)))
        if not isinstance(header, PlanHeader):
            raise MessageError(f"the plan must come first, not a {header.tag!r} message")
        columns = {name: decode_column(read_frame(stdin)) for name in COLUMNS}
    except (ChannelClosed, BrokenPipeError):  # pytest went away (an answer found the pipe closed)
        return None
    return header, columns
