"""pytest-rollouts: collect LLM agent rollouts as pytest items, or from Python, and score them honestly.

The public names are loaded on first use: pytest imports this package in every session
through the ``pytest11`` entry point, and a session that does not use rollouts must not pay
for pydantic or the dispatcher.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_rollouts.api import preprocess_examples, run_examples
    from pytest_rollouts.config.collection import CollectionConfig
    from pytest_rollouts.dispatch.inprocess import HealthCheckFailed
    from pytest_rollouts.model.convert import output_text
    from pytest_rollouts.runner import (
        CollectionRefused,
        CollectionWarning,
        RunInterrupted,
        RunResult,
        run,
        run_from_config,
    )

# Each public name, and the module that defines it.
_HOMES = {
    "preprocess_examples": "pytest_rollouts.api",
    "run_examples": "pytest_rollouts.api",
    "HealthCheckFailed": "pytest_rollouts.dispatch.inprocess",
    "CollectionConfig": "pytest_rollouts.config.collection",
    "run_from_config": "pytest_rollouts.runner",
    "run": "pytest_rollouts.runner",
    "RunResult": "pytest_rollouts.runner",
    "CollectionRefused": "pytest_rollouts.runner",
    "CollectionWarning": "pytest_rollouts.runner",
    "RunInterrupted": "pytest_rollouts.runner",
    "output_text": "pytest_rollouts.model.convert",
}
__all__ = [  # noqa: RUF022  (the order of _HOMES)
    "preprocess_examples",
    "run_examples",
    "HealthCheckFailed",
    "CollectionConfig",
    "run_from_config",
    "run",
    "RunResult",
    "CollectionRefused",
    "CollectionWarning",
    "RunInterrupted",
    "output_text",
]
assert set(__all__) == set(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_rollouts' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
