"""The arithmetic suite's verifier: the exact boxed answer.

``score(row, response)`` gets the dataset row and the final response in OpenAI Responses API shape.
Reward 1.0 when the last ``\\boxed{...}`` in the final assistant message equals the row's
``expected_answer`` exactly (after stripping whitespace), else 0.0. The answer it found is kept in
the result row as ``extracted_answer`` (None when there is no box).
"""

from __future__ import annotations

import re
from typing import Any

from pytest_rollouts import output_text

BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def score(row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    boxed = BOXED_RE.findall(output_text(response))
    extracted = boxed[-1].strip() if boxed else None
    expected = str(row.get("expected_answer", "")).strip()
    return {"reward": 1.0 if extracted == expected else 0.0, "extracted_answer": extracted}
