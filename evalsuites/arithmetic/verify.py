"""The arithmetic suite's verifier: the exact boxed answer.

``score(row, response)`` gets the dataset row and the final response in OpenAI Responses API shape.
Reward 1.0 when the last ``\\boxed{...}`` in the final assistant message equals the row's
``expected_answer`` exactly (after stripping whitespace), else 0.0. The answer it found is kept in
the result row as ``extracted_answer`` (None when there is no box). Stdlib only.
"""

from __future__ import annotations

import re
from typing import Any

BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def _final_text(response: Any) -> str:
    """The text of the last assistant message in ``response["output"]``."""
    output = response.get("output") if isinstance(response, dict) else None
    for item in reversed(output if isinstance(output, list) else []):
        if isinstance(item, dict) and item.get("type") == "message":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(
                p["text"]
                for p in (content if isinstance(content, list) else [])
                if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str)
            )
    return ""


def score(row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    boxed = BOXED_RE.findall(_final_text(response))
    extracted = boxed[-1].strip() if boxed else None
    expected = str(row.get("expected_answer", "")).strip()
    return {"reward": 1.0 if extracted == expected else 0.0, "extracted_answer": extracted}
