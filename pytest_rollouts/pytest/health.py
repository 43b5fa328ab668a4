"""A refusal as a pytest session says it: unhealthy agents worded in its options' names.

Kept out of ``session.py``: only a refused session imports the health check's wording.
"""

from __future__ import annotations

from pytest_rollouts.lifecycle.refusal import Refusal

NO_HEALTH_CHECK = "Fix or restart them, or pass --rollouts-no-health-check (or --rollouts-health-ignore CHECK)."


def refusal_said(refusal: Refusal) -> str:
    """What the session says of ``refusal``: a health refusal lists the agents and how to turn the check off."""
    if refusal.where != "health":
        return str(refusal)
    from pytest_rollouts.dispatch.health import refusal_text

    return refusal_text(refusal.lines, "nothing was dispatched", NO_HEALTH_CHECK) + refusal.undo
