"""One typed refusal: a run refused before any request was sent, for every door to render.

A door used to carry a refusal as prose (a usage error's text, a string held until a later hook);
a ``Refusal`` says why, with which exit status, and at which stage, so each door renders it its
own way (a usage error, ``CollectionRefused``, a line on stderr) without deciding it again.
"""

from __future__ import annotations

from pytest_rollouts.datatype import datatype

# The exit statuses a refusal asks for (docs/scoring.md, "Exit codes").
USAGE = 4  # bad options or inputs, a busy output, damaged recorded files
INTERRUPTED = 2  # unhealthy agents: the run could not start (pytest's status for a stopped session)


@datatype
class Refusal(Exception):
    """The run was refused before any request; its files are as it found them.

    ``where``: the stage that refused (``read``, ``lock``, ``agents``, ``health``, ``prepare``,
    ``score``); ``lines``: the unhealthy agents, one line each, for a health refusal that a
    door words in its own options' names; ``undo``: what was put back, said after the reason."""

    reason: str
    exit_status: int = USAGE
    where: str = ""
    lines: tuple[str, ...] = ()
    undo: str = ""

    def __str__(self) -> str:
        return f"{self.reason}{self.undo}"
