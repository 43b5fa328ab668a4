"""What one model agent is, as the dispatcher receives it: plain values that cross the pipe.

The suite's declaration (``config/suite.py``) is checked with pydantic in the pytest process;
the dispatcher gets this dataclass, already resolved (``${VAR}`` expanded, ``--rollouts-model``
applied, an embedded model's address known, paths absolute), so it imports no pydantic for it.
"""

from __future__ import annotations

from dataclasses import dataclass

# ``api``: Chat Completions; the other value, "responses", is the Responses API.
CHAT = "chat"
DEFAULT_MAX_TURNS = 8


@dataclass(frozen=True, slots=True)
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
