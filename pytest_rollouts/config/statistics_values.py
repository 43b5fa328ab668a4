"""The values of the statistics options that are lists in a word: ``--rollouts-reward-range LO,HI``
and ``--rollouts-pass-k K[,K...]``, as field types of the settings model (as ``output_values.py``)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from pytest_rollouts.config.values import beyond_float


def _split_numbers(value: Any) -> Any:
    """``LO,HI`` and ``K[,K...]`` as text (an option, an ini line) become tuples to check."""
    if isinstance(value, str):
        parts = tuple(part.strip() for part in value.split(",") if part.strip())
        for part in parts:
            if beyond_float(part):
                raise ValueError(f"must be two finite numbers, LO,HI{beyond_float(part)}")
        return parts
    return value


def _range_in_order(value: tuple[float, float]) -> tuple[float, float]:
    if not all(map(math.isfinite, value)):
        raise ValueError("must be two finite numbers, LO,HI")
    if value[0] >= value[1]:
        raise ValueError("must be LO,HI with LO < HI")
    return value


def _positive_ks(value: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if value is not None and (not value or min(value) < 1):
        raise ValueError("must be whole numbers at least 1, e.g. 1,5,10")
    return None if value is None else tuple(sorted(set(value)))


RewardRangeValue = Annotated[tuple[float, float], BeforeValidator(_split_numbers), AfterValidator(_range_in_order)]
PassKs = Annotated[tuple[int, ...] | None, BeforeValidator(_split_numbers), AfterValidator(_positive_ks)]
