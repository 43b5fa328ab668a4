"""The command-line options and their ini twins, as plain data.

This module is imported by every pytest session (through ``plugin.py``), so it holds
only names and help texts; validation lives in ``settings.py`` and is imported only
when a session actually uses rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import UnionType


@dataclass(frozen=True)
class Option:
    """One setting, reachable as ``--rollouts-<name>`` and as ini ``rollouts_<name>``.

    A ``keyed`` repeatable option's entries each carry a key (an agent's name, a header's agent
    and name, a routing key), so its sources combine: ini, then env, then the command line, an
    entry replacing a weaker source's entry with the same key. Any other option takes its
    strongest source whole: an unkeyed list (checks, failure classes) has no key by which the
    command line could take back an ini entry, so it replaces the ini list instead.
    """

    name: str
    help: str
    metavar: str | None = None
    flag: bool = False
    repeatable: bool = False
    keyed: bool = False
    env: str | None = None

    @property
    def cli(self) -> str:
        return "--rollouts-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "rollouts_" + self.name

    @property
    def ini_type(self) -> str | UnionType:
        """A flag's ini value that pytest cannot read as a bool stays a string, which the settings
        model then refuses naming the ini key (pytest's own error names no key). Needs pytest 9.2."""
        if self.flag:
            return bool | str
        return "linelist" if self.repeatable else "string"


OPTIONS: tuple[Option, ...] = (
    Option(
        "out",
        "Output path <stem>.jsonl; the sidecars are named after it. Default: results/rollouts.jsonl under the rootdir.",
        "PATH",
    ),
    Option(
        "agent",
        "Agent server: URL sets the default agent, NAME=URL adds or overrides a named one (repeatable).",
        "[NAME=]URL",
        repeatable=True,
        keyed=True,
    ),
    Option(
        "repeats",
        "Rollouts per dataset row (num_repeats): N, or per agent AGENT=N,_default=M. Default 1.",
        "N|AGENT=N,...",
    ),
    Option(
        "agent_map",
        "Run rows that name agent (or task_source, or taskset) FROM on agent TO instead; FROM may be "
        "_default, the rows that name none (repeatable).",
        "FROM=TO",
        repeatable=True,
        keyed=True,
    ),
    Option(
        "fan_out",
        "Copy every row that names agent (or task_source, or taskset) KEY once per listed agent; "
        "rollout indices continue per task (repeatable).",
        "KEY=A,B[,...]",
        repeatable=True,
        keyed=True,
    ),
    Option(
        "agent_header",
        "HTTP header sent with every request to agents (or only AGENT's); VALUE may be ${ENV_VAR}. "
        "Never written or printed (repeatable; env ROLLOUTS_AGENT_HEADERS, one per line).",
        "[AGENT:]NAME=VALUE",
        repeatable=True,
        keyed=True,
        env="ROLLOUTS_AGENT_HEADERS",
    ),
    Option(
        "head_server",
        "Read agent names and addresses from a running NeMo Gym head server (GET /global_config_dict_yaml).",
        "HOST:PORT",
    ),
    Option("no_health_check", "Do not GET /health on the agents before dispatch.", flag=True),
    Option(
        "health_ignore",
        "Health-check failures to tolerate: a check named in a /health reply, or an agent not to check "
        "(comma-separated, repeatable).",
        "CHECK[,CHECK...]",
        repeatable=True,
    ),
    Option("health_workers", "Health checks run at once. Default 8.", "N"),
    Option("limit", "Use only the first N rows of each dataset file.", "N"),
    Option("interleave_repeats", "Order rollouts a b c a b c instead of a a b b c c.", flag=True),
    Option(
        "repeats_add_seed", 'Put {"seed": rollout_index} into responses_create_params.metadata.extra_body.', flag=True
    ),
    Option("responses_create_params", "JSON object shallow-merged into every row's responses_create_params.", "JSON"),
    Option("parallel", "Requests in flight at once (num_samples_in_parallel). Default 64.", "N"),
    Option("max_resident", "Rollouts admitted but not yet reported, which bounds memory. Default 8 x parallel.", "N"),
    Option("timeout", "Seconds one /run attempt may take. Default 3600.", "S"),
    Option(
        "retries",
        "Retries within the run (tries of the same attempt) of a /run that got no reply or 429/502/503/504. Default 2.",
        "N",
    ),
    Option("retry_backoff", "Base of the exponential backoff between retries, seconds. Default 1.0.", "S"),
    Option(
        "resume",
        "Continue the run recorded at --rollouts-out: run only the materialized rollouts that have no result yet.",
        flag=True,
    ),
    Option(
        "resume_recorded",
        "On resume, go on with the recorded materialized set even though the dataset or options changed.",
        flag=True,
    ),
    Option(
        "max_attempts",
        "Attempts per rollout across runs (one per run that tried it, in-run retries included) before resume "
        "gives up on it (env NEMO_GYM_MAX_ROLLOUT_ATTEMPTS). Default 3.",
        "N",
        env="NEMO_GYM_MAX_ROLLOUT_ATTEMPTS",
    ),
    Option(
        "retry_terminal_timeouts",
        "On resume, retry rollouts whose latest failure is a terminal timeout_exceeded (never skipped).",
        flag=True,
    ),
    Option("longest_first", "On resume, start first the tasks whose earlier attempts ran longest.", flag=True),
    Option(
        "count_as_zero",
        "Failure classes whose rollouts enter the metrics as reward 0 when they never succeeded "
        "(count_failure_classes_as_zero; comma-separated, repeatable).",
        "CLASS[,CLASS...]",
        repeatable=True,
    ),
    Option(
        "count_missing_as_zero",
        "Materialized rollouts that left no row anywhere enter the metrics as reward 0.",
        flag=True,
    ),
    Option(
        "require_complete",
        "Exit 6 unless every materialized rollout completed (after all artifacts are written).",
        flag=True,
    ),
    Option("fail_under", "Exit 7 when the mean reward is below X.", "X"),
    Option(
        "shard",
        "Run only shard K of N (0 <= K < N): a stable hash of the task index picks the tasks, "
        "so a task's repeats stay together. Merge with `pytest-rollouts aggregate`.",
        "K/N",
    ),
    Option(
        "dispatch_budget",
        "Stop starting rollouts S seconds after dispatch began (dispatch_budget_s); drained rollouts are "
        "class cancelled, written nowhere, and run by the next --rollouts-resume.",
        "S",
    ),
    Option(
        "drain_margin",
        "Within the budget, do not start a rollout with less than S seconds left (drain_margin_s). "
        "Default: the p75 of this run's successful rollout durations, once 5 have finished.",
        "S",
    ),
    Option(
        "no_aggregate",
        "Skip metrics (for shards merged later); coverage and --rollouts-require-complete still apply, "
        "--rollouts-fail-under is refused (gate the merge).",
        flag=True,
    ),
)
