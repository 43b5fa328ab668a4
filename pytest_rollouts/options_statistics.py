"""The statistics options' entries of the options table (``options.py``): how a run is compared
with a baseline and gated on it, and how its statistics are shaped. Plain data, as the table is.
"""

from __future__ import annotations

from pytest_rollouts.option import Option

STATISTICS_OPTIONS: tuple[Option, ...] = (
    Option(
        "baseline",
        "A baseline run's <stem>.jsonl: compare this run with it task by task at the end (paired difference, "
        "95% CI, test, the tasks that flipped), as pytest-rollouts compare does.",
        "PATH",
        details="Tasks pair by a `task_id` field, else by index over the same datasets (their manifests' sha256). "
        "Tasks only one run has are left out, and the comparison says how many.",
    ),
    Option(
        "max_regression",
        "Exit 10 when the lower end of the 95% CI of this run minus --rollouts-baseline is below -DELTA.",
        "DELTA",
        details="Needs `--rollouts-baseline`. Fewer than two tasks scored in both runs give no interval and fail. "
        "While a paired task has a rollout without a score (failed, no reward, no row) in either run, the "
        "interval judged is the pessimistic one: each such rollout at its worst for this run (its own at the "
        "floor of --rollouts-reward-range, the baseline's at the ceiling).",
    ),
    Option(
        "gate_scored_only",
        "Let --rollouts-max-regression judge only the tasks both runs scored, even while rollouts lack a score; "
        "by default they count at their worst for this run.",
        flag=True,
        details="Needs `--rollouts-max-regression`. A run that failed most of its tasks can pass this way: "
        "the gate's line says how many tasks lack scores.",
    ),
    Option(
        "correction",
        "Adjust the p-values of the groups compared with --rollouts-baseline for their number: holm (family-wise) "
        "or bh (false discovery rate); a --rollouts-max-regression gate then judges each group's adjusted p-value.",
        "none|holm|bh",
        default="none",
    ),
    Option(
        "sequential",
        "Add each group's anytime-valid 95% confidence sequence of the difference with --rollouts-baseline, and "
        "after how many tasks it excluded 0 (a sequential run could stop there).",
        flag=True,
    ),
    Option(
        "reward_range",
        "The lowest and highest reward: Manski's bounds score each failed or missing rollout at LO and at HI. "
        "A negative LO is given after =, as argparse reads -1,1 as an option (--rollouts-reward-range=-1,1).",
        "LO,HI",
        default=(0.0, 1.0),
        computed_default="0,1",
    ),
    Option(
        "gate_on",
        "What --rollouts-fail-under compares: the mean reward, or the lower-bound (Manski's, failed and missing "
        "rollouts at the floor of --rollouts-reward-range).",
        "mean|lower-bound",
        default="mean",
    ),
    Option(
        "pass_k",
        "The k of pass@k and pass^k in the local metrics (comma-separated).",
        "K[,K...]",
        computed_default="1,2,4,... up to the most rollouts of a task",
        details="A task with fewer than k scored rollouts is left out of that k and counted in "
        "`pass@k/num_tasks_excluded`.",
    ),
    Option(
        "group_by",
        "Also report the mean reward, its CI and Manski's bounds by this row field (and by dataset file).",
        "FIELD",
        details="Written under `statistics.by_field` and `statistics.by_dataset` of each group's metrics entry.",
    ),
)
