"""pytest-rollouts: collect LLM agent rollouts as pytest items, or from Python, and score them honestly.

The public names are loaded on first use: pytest imports this package in every session
through the ``pytest11`` entry point, and a session that does not use rollouts must not pay
for pydantic or the dispatcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_rollouts.api import preprocess_examples

__all__ = ["preprocess_examples"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pytest_rollouts import api

        return getattr(api, name)
    raise AttributeError(f"module 'pytest_rollouts' has no attribute {name!r}")
