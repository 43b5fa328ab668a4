"""What one model agent is, as the dispatcher receives it: plain values that cross the pipe.

The suite's declaration (``config/suite.py``) is checked with pydantic in the pytest process;
the dispatcher gets this dataclass, already resolved (``${VAR}`` expanded, ``--rollouts-model``
applied, an embedded model's address known, paths absolute), so it imports no pydantic for it.
"""

from __future__ import annotations

import os

from pytest_rollouts.datatype import datatype

# ``api``: Chat Completions; the other value, "responses", is the Responses API.
CHAT = "chat"
DEFAULT_MAX_TURNS = 8


@datatype(frozen=True, slots=True)
class ModelPlan:
    """One model agent. ``verifier`` and ``tools`` are ``/abs/file.py:name`` ("" for no tools);
    ``api_key_env`` names the variable the key is read from ("" for none): the key itself never
    travels, so it cannot end up in a message, a log or an artifact."""

    base_url: str
    model_name: str
    api: str
    api_key_env: str
    verifier: str
    tools: str
    max_turns: int


def model_headers(plan: ModelPlan) -> dict[str, str]:
    """The model's request headers: its API key, read from the variable the suite names when
    needed, so the key is in no message, command line or file. The caller adds them to the
    run's redaction."""
    if not plan.api_key_env:
        return {}
    key = os.environ.get(plan.api_key_env)
    if not key:
        raise ValueError(f"the model's API key variable {plan.api_key_env} is not set")
    return {"Authorization": f"Bearer {key}"}
