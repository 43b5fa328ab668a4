"""The repository's own test sessions: pytester for plugin tests, and a clean environment.

The plugin reads settings from the environment (``ROLLOUTS_*``, NeMo Gym's
``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``); a developer's shell that sets one must not change what a
test sees, nor what the sessions and processes it starts inherit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_rollouts.options import OPTIONS

pytest_plugins = ["pytester"]

PLUGIN_ENV = frozenset(option.env for option in OPTIONS if option.env)


def plugin_variables() -> list[str]:
    """Every environment variable the plugin reads that is set now."""
    return sorted(name for name in os.environ if name in PLUGIN_ENV or name.startswith("ROLLOUTS_"))


@pytest.fixture(autouse=True)
def _no_plugin_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in plugin_variables():
        monkeypatch.delenv(name)
    yield
