"""The live NeMo Gym tests (``nemo_gym`` marker) run only when asked for with ``-m nemo_gym``: they start
a real stack on fixed loopback ports and take minutes, so a plain test run skips them, saying how."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "nemo_gym" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="a live NeMo Gym test: run it with -m nemo_gym (tests/interop/test_live.py)")
    for item in items:
        if item.get_closest_marker("nemo_gym") is not None:
            item.add_marker(skip)
