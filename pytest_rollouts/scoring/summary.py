"""A score as text: the lines a run's section and the aggregate CLI print, read from the score alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import RunScore


def score_lines(
    score: RunScore, sidecar: str, count_as_zero_option: str = "--rollouts-count-as-zero", out: str = "the output"
) -> list[str]:
    """Key metrics per group, then the coverage report; numbers come from the score, never recomputed.

    ``count_as_zero_option``: that policy's name where it was given (the merge calls it ``--count-as-zero``).
    ``sidecar``, ``out``: where the rows the score misses are, failures and results.
    """
    lines = []
    coverage = score.coverage
    if coverage.completed == 0 and coverage.expected:
        by_class = ", ".join(f"{n} {c}" for n, c in sorted(coverage.missing_by_class.items()))
        lines.append(
            f"None of the {coverage.expected} materialized rollouts produced a result "
            f"({by_class}{coverage.pointer(sidecar, out)})"
        )
    for group in score.groups:
        if not group.metrics:
            continue
        key = group.metrics.get("key_metrics") or {}
        mean, se = group.mean_reward, key.get("sem_clustered/reward")
        if mean is None:
            lines.append(
                f"{group.agent}: its metrics hold no mean/reward ({group.coverage.scored} rollouts scored) "
                f"[{group.source} metrics]"
            )
            continue
        shown = f"{mean:.4f}" + (f" ± {se:.4f} (se, tasks as clusters)" if isinstance(se, (int, float)) else "")
        passes = ", ".join(
            f"{name.split('/')[0]} {value:.4f}"
            for name, value in key.items()
            if name.startswith("pass@") and value is not None
        )
        lines.append(
            f"{group.agent}: mean reward {shown} over {group.coverage.scored} rollouts"
            + (f"; {passes}" if passes else "")
            + f" [{group.source} metrics]"
        )
        if group.note:
            lines.append(f"{group.agent}: {group.note}")
    lines.extend(coverage.report_lines(sidecar, count_as_zero_option, out))
    return lines
