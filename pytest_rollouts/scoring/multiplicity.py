"""Many comparisons at once: p-values adjusted for the number of groups (suites, agents) gated together.

A release gated on eight suites, each at 5%, raises a false alarm somewhere one time in three when
nothing changed (1 - 0.95^8). Two corrections are offered, chosen by ``--rollouts-correction``:

- ``holm`` (Holm 1979, "A Simple Sequentially Rejective Multiple Test Procedure"): controls the
  family-wise error, the chance of any false alarm among the groups, at the nominal level, whatever
  the dependence between them. Sorted ascending, p_(i) becomes max_{j<=i} min(1, (m - j + 1) p_(j)).
- ``bh`` (Benjamini and Hochberg 1995, "Controlling the False Discovery Rate"): controls the
  expected share of false alarms among the groups flagged, a weaker promise with more power for
  many suites. Sorted ascending, p_(i) becomes min_{j>=i} min(1, m p_(j) / j).

Both are what ``statsmodels.stats.multitest.multipletests`` gives as ``holm`` and ``fdr_bh``; the
tests check them against it. A group without a p-value (no task scored in both runs) is left out of
the family and keeps None.
"""

from __future__ import annotations

from collections.abc import Sequence

NONE = "none"
HOLM = "holm"
BH = "bh"
CORRECTIONS = (NONE, HOLM, BH)
# As the lines name each correction.
NAMES = {HOLM: "Holm", BH: "Benjamini-Hochberg"}


def adjust(p_values: Sequence[float | None], method: str) -> list[float | None]:
    """The adjusted p-values, in the order given (None stays None and does not count in the family)."""
    if method not in CORRECTIONS:
        raise ValueError(f"a correction is one of {', '.join(CORRECTIONS)}, got {method!r}")
    present = [(p, i) for i, p in enumerate(p_values) if p is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    if method == NONE:
        return list(p_values)
    ordered = sorted(present)
    values = _holm([p for p, _ in ordered]) if method == HOLM else _bh([p for p, _ in ordered])
    for (_, index), value in zip(ordered, values, strict=True):
        adjusted[index] = value
    return adjusted


def _holm(ascending: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of p-values sorted ascending: a running maximum of (m - j) p_(j)."""
    m, out, running = len(ascending), [], 0.0
    for j, p in enumerate(ascending):
        running = max(running, min(1.0, (m - j) * p))
        out.append(running)
    return out


def _bh(ascending: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg's step-up adjustment: a running minimum of m p_(j) / j from the largest down."""
    m, out, running = len(ascending), [0.0] * len(ascending), 1.0
    for j in range(m - 1, -1, -1):
        running = min(running, m * ascending[j] / (j + 1))
        out[j] = running
    return out
