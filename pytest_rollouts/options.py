"""The options, one entry each: the one place their names, defaults, environment variables and help live.

From this table come the command-line options and their ini twins (``plugin.py``), the
defaults and descriptions of the settings model (``config/settings.py``, the Python API's
``CollectionConfig``) and the options reference (``python -m pytest_rollouts.options >
docs/options.md``); ``tests/config/test_option_table.py`` fails when any of them disagrees with it.

Every pytest session imports this module (through ``plugin.py``), so it holds plain data only;
validation lives in ``config/settings.py``, imported only when a session uses rollouts.
"""

from __future__ import annotations

from collections.abc import Iterator

from pytest_rollouts.option import Option, option_reference
from pytest_rollouts.options_statistics import STATISTICS_OPTIONS

OPTIONS: tuple[Option, ...] = (
    Option(
        "out",
        "Output path <stem>.jsonl; the sidecars are named after it.",
        "PATH",
        computed_default="results/rollouts.jsonl under the rootdir",
        details="Another name, an empty value or a directory is a usage error. A relative path given on the "
        "command line is read from the current directory, one in ini from the rootdir.",
    ),
    Option(
        "agent",
        "Agent server: URL sets the default agent, NAME=URL adds or overrides a named one (repeatable).",
        "[NAME=]URL",
        repeatable=True,
        keyed=True,
        default=(),
    ),
    Option(
        "repeats",
        "Rollouts per dataset row (num_repeats): N, or per agent AGENT=N,_default=M.",
        "N|AGENT=N,...",
        default=1,
        details="An agent the per-agent form does not list gets `_default`, else 1.",
    ),
    Option(
        "agent_map",
        "Run rows that name agent (or task_source, or taskset) FROM on agent TO instead; FROM may be "
        "_default, the rows that name none (repeatable).",
        "FROM=TO",
        repeatable=True,
        keyed=True,
        default={},
    ),
    Option(
        "fan_out",
        "Copy every row that names agent (or task_source, or taskset) KEY once per listed agent; "
        "rollout indices continue per task (repeatable).",
        "KEY=A,B[,...]",
        repeatable=True,
        keyed=True,
        default={},
    ),
    Option(
        "agent_header",
        "HTTP header sent with every request to agents (or only AGENT's); VALUE may be ${ENV_VAR}. "
        "Never written or printed (repeatable; one per line in the environment variable).",
        "[AGENT:]NAME=VALUE",
        repeatable=True,
        keyed=True,
        env="ROLLOUTS_AGENT_HEADERS",
        default=(),
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
        default=frozenset(),
    ),
    Option("health_workers", "Health checks run at once.", "N", default=8),
    Option("limit", "Use only the first N rows of each dataset file.", "N"),
    Option("interleave_repeats", "Order rollouts a b c a b c instead of a a b b c c.", flag=True),
    Option(
        "repeats_add_seed",
        'Put {"seed": rollout_index} into responses_create_params.metadata.extra_body.',
        flag=True,
        details="`extra_body` is a JSON string there, as NeMo Gym writes it.",
    ),
    Option(
        "responses_create_params",
        "JSON object shallow-merged into every row's responses_create_params.",
        "JSON",
        default={},
    ),
    Option(
        "parallel",
        "Requests in flight at once (num_samples_in_parallel): N, or auto:MAX to let each agent's limit "
        "adapt below MAX (down on 429/503, connection errors and rising latency, up while it keeps up).",
        "N|auto:MAX",
        default=64,
        details="The limit over time is in the metrics file and the report; under `-n` each worker adapts "
        "its own share of MAX. See docs/dispatch.md.",
    ),
    Option(
        "max_resident",
        "Rollouts admitted but not yet reported, which bounds memory.",
        "N",
        computed_default="8 x parallel",
        details=(
            "The item pytest is waiting on is always admitted, so the bound can be exceeded by that item's repeats."
        ),
    ),
    Option(
        "timeout",
        "Seconds one /run attempt may take (for a model agent: one rollout, every turn included).",
        "S",
        default=3600.0,
    ),
    Option(
        "model",
        "The OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1) of every model agent, in place of "
        "the suites' model or model_embedded.",
        "URL",
        details="See docs/model-agents.md.",
    ),
    Option("model_name", "The model name every model agent sends, in place of the suites' model_name.", "NAME"),
    Option(
        "model_parallel",
        "Model calls in flight at once, over every model agent.",
        "N",
        computed_default="parallel",
        details="Under `-n`, each worker gets its share, as of `--rollouts-parallel`.",
    ),
    Option(
        "model_timeout",
        "Seconds one model call may take; a call that takes longer is retried like a 5xx.",
        "S",
        default=600.0,
    ),
    Option(
        "retries",
        "Retries within the run (tries of the same attempt) of a /run that got no reply or 429/502/503/504.",
        "N",
        default=2,
        details="A retry keeps its rollout's `_ng_attempt_index`: it does not count toward `--rollouts-max-attempts`.",
    ),
    Option(
        "retry_backoff",
        "Base of the exponential backoff between retries, seconds.",
        "S",
        default=1.0,
        details="Jittered and doubled each time, at most 60 s; a `Retry-After` header is honoured.",
    ),
    Option(
        "retry_budget",
        "Retries allowed, as a fraction of the requests sent over the last 10 s (plus 10 a second): past it, "
        "a failure that would be retried is written to the failures sidecar instead.",
        "FRACTION",
        default=0.1,
        details="One budget for the whole run (each xdist worker: its own), so an overloaded agent sees at most "
        "this much extra load however many rollouts fail. 0 retries only within the floor. The summary says how "
        "many retries it refused; `--rollouts-resume` sends those rollouts again. See docs/dispatch.md.",
    ),
    Option(
        "progress_interval",
        "Seconds between redraws of the status line on a terminal, and between the dispatcher's reports "
        "of what is in flight while no result comes.",
        "S",
        default=2.0,
        details="From 0.05 to 60 s: pytest takes a dispatcher silent for 120 s to be stuck. A log (no terminal) "
        "gets a line per tenth of the run, or every 5 minutes, whatever this says.",
    ),
    Option(
        "cache",
        "Keep model agents' replies in DIR, keyed by the request (model, messages, parameters, seed, tools) "
        "and the repeat: a rerun of an unchanged row does not call the model.",
        "DIR",
        details="Only usable replies are kept (never a non-2xx, a body that is not JSON, a timeout); a damaged "
        "entry is a miss, said on stderr. Safe under -n. Hits and misses are in the summary and the metrics file's "
        "`usage_summary`; see docs/model-agents.md.",
    ),
    Option(
        "status_interval",
        "Seconds between rewrites of the live status file <out>.status.json (done, failed, in flight, rate, ETA); "
        "`pytest-rollouts status OUT` prints it.",
        "S",
        default=5.0,
        details="From 0.05 to 3600 s. The file is replaced whole each time, and once more when the run ends, "
        "saying how (finished, stopped, failed); see docs/observability.md.",
    ),
    Option(
        "resume",
        "Continue the run recorded at --rollouts-out: run only the materialized rollouts that have no result yet.",
        flag=True,
    ),
    Option(
        "overwrite",
        "Delete the earlier results at --rollouts-out instead of moving them into a <stem>.prev-<time> "
        "folder beside it.",
        flag=True,
        details="Refused with `--rollouts-resume` (exit 4), which continues them. They are deleted when the first "
        "request goes out: a run refused or stopped before that (an unhealthy agent, Ctrl-C) puts them back.",
    ),
    Option(
        "resume_recorded",
        "On resume, go on with the recorded materialized set even though the dataset or options changed.",
        flag=True,
    ),
    Option(
        "max_attempts",
        "Attempts per rollout across runs (one per run that tried it, in-run retries included) before resume "
        "gives up on it.",
        "N",
        env="NEMO_GYM_MAX_ROLLOUT_ATTEMPTS",
        default=3,
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
        default=frozenset(),
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
    Option(
        "fail_under",
        "Exit 7 when the mean reward is below X.",
        "X",
        details="Refused with `--rollouts-no-aggregate` (exit 4): gate the merge instead "
        "(`pytest-rollouts aggregate ... --fail-under X`).",
    ),
    Option(
        "max_failures",
        "Exit 9 when more than N rollouts (or P% of the materialized ones) failed or replied without a "
        "numeric reward. Whatever it says, a run in which no rollout produced a reward exits 9.",
        "N|P%",
        details="Failed: a failure class (`cancelled` included, and those `--rollouts-count-as-zero` scores) "
        "or `no_reward`; `mask_sample` rows and rollouts without a row are not failures.",
    ),
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
        details="The clock starts with the dispatcher, agent health checks included. Checked when a request "
        "would go out, retries included: a retry refused keeps the failure it would have retried.",
    ),
    Option(
        "drain_margin",
        "Within the budget, do not start a rollout with less than S seconds left (drain_margin_s).",
        "S",
        computed_default="the p75 of this run's successful rollout durations, once 5 have finished",
    ),
    Option(
        "no_aggregate",
        "Skip metrics (for shards merged later); coverage and --rollouts-require-complete still apply, "
        "--rollouts-fail-under is refused (gate the merge).",
        flag=True,
    ),
    # Issue 20: statistics beyond the mean (docs/statistics.md).
    *STATISTICS_OPTIONS,
    Option(
        "html",
        "Write the run's self-contained HTML report here once it is scored: coverage, metrics, gates, charts "
        "and every rollout (docs/report.md).",
        "FILE",
        details="A relative path given on the command line is read from the current directory, one in ini from "
        "the rootdir. With --rollouts-baseline it shows the comparison too. A report that cannot be written "
        "is said on a `rollouts:` line and leaves the run's results and exit status as they are.",
    ),
    Option(
        "split",
        "Which split of the suites' datasets to run: train, validation or benchmark.",
        "train|validation|benchmark",
        computed_default="benchmark in a suite that declares one, else every dataset",
        details="A suite declares its splits under `[splits]` in `rollouts.toml`; a head server's datasets by "
        "their `type`. The run's split is recorded in the run manifest (a resume with another one is refused) "
        "and the metrics file. `example` datasets are smoke-test samples, never a split: name the file instead.",
    ),
    Option(
        "prompt_config",
        "A prompt template (YAML: system, few_shot, user with {field} placeholders) that builds every row's "
        "responses_create_params.input.",
        "PATH",
        computed_default="the suite's or the head server's dataset's prompt_config, if any",
        details="Its hash is in the run manifest: a resume with a changed template is refused like a changed "
        "dataset. See docs/datasets-and-agents.md#prompt-templates.",
    ),
    Option(
        "materialized",
        "Where to write the materialized inputs.",
        "PATH",
        computed_default="`<stem>_materialized_inputs.jsonl` beside the output",
        details="Recorded in the run manifest, so --rollouts-resume and `pytest-rollouts aggregate` find the "
        "file without this option. A relative path given on the command line is read from the current "
        "directory, one in ini from the rootdir.",
    ),
    Option(
        "retry_invalid_judge_responses",
        "A result with invalid_judge_response: true is a judge_invalid failure, sent again by a resume; a resume "
        "moves such results of earlier runs from the output to the failures sidecar.",
        flag=True,
        details="For verifiers whose judge can answer unparseably; others score that as a zero on purpose. A head "
        "server's config (top-level `retry_invalid_judge_responses`) or a suite's `rollouts.toml` (the same key) "
        "may set it. See docs/resume.md.",
    ),
    Option(
        "environment_routing_mode",
        "Where flat rows (not episode rows) go: agent (their agent, or the one environment server a head server's "
        "config puts in front of it), legacy (all to --rollouts-environment-server) or taskset (refused: episode "
        "rows only).",
        "agent|legacy|taskset",
        default="agent",
        details="NeMo Gym's `environment_routing_mode`. A row sent to an environment server is stamped "
        "`_ng_environment_server` in its result and failures (under legacy also in the materialized inputs, as "
        "NeMo Gym does) and scored in that server's group. See docs/datasets-and-agents.md#environment-routing-modes.",
    ),
    Option(
        "environment_server",
        "The environment server legacy routing sends every flat row to (an agent name: --rollouts-agent NAME=URL, "
        "a suite's agent or a head server's environment server).",
        "NAME",
        details="NeMo Gym's `environment_server_name`; a head server's config may set both (top-level "
        "`environment_routing_mode`, `environment_server_name`).",
    ),
    Option(
        "wandb",
        "At the end, log the metrics, the coverage and the metrics file (and the HTML report) to this "
        "Weights & Biases project.",
        "PROJECT",
        details="Needs `pip install 'pytest-rollouts[wandb]'`. W&B's own variables (`WANDB_API_KEY`, "
        "`WANDB_MODE=offline`, ...) apply; a failed export is a `rollouts:` line and leaves the exit status "
        "as it was. See [observability.md](observability.md).",
    ),
    Option(
        "mlflow",
        "At the end, log the metrics, the coverage and the metrics file (and the HTML report) to this MLflow "
        "experiment.",
        "EXPERIMENT",
        details="Needs `pip install 'pytest-rollouts[mlflow]'`; the tracking server is `MLFLOW_TRACKING_URI`'s. "
        "A failed export is a `rollouts:` line and leaves the exit status as it was. See "
        "[observability.md](observability.md).",
    ),
)

OPTION: dict[str, Option] = {option.name: option for option in OPTIONS}


def reference() -> Iterator[str]:
    """The options reference (``docs/options.md``), line by line, from the table."""
    return option_reference(OPTIONS)


if __name__ == "__main__":
    print("\n".join(reference()))
