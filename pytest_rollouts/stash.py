"""Stash keys the hooks share; a module of its own so inert sessions can check them for free."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .run import RolloutRun

RUN_KEY = pytest.StashKey["RolloutRun"]()
