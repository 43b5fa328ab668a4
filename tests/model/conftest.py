"""The model agent tests' fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..models import FakeModel


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server
