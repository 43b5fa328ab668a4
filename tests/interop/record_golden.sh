#!/usr/bin/env bash
# Re-record NeMo Gym's own artifacts under tests/interop/golden/, from a real NeMo Gym stack.
#
#   bash tests/interop/record_golden.sh          # from the project root; about a minute
#
# Needs the stack of ../shared/nemo_gym (its README: install.sh once, a Python >= 3.13). This
# script starts it (stopping one already started with the same NG_HOME), runs NeMo Gym's own
# collector (`gym eval run`) three times on 21 rows x 2 seeded repeats, and stops it. The rows are
# 20 arithmetic questions and one whose `temperature` the agent refuses (HTTP 422), so the failures
# sidecar holds NeMo Gym's own `agent_run_error` rows:
#   agent/    agent routing through the head server (NeMo Gym's default)
#   legacy/   legacy routing: every row to the environment server, stamped with it
#   partial/  agent routing again, the collector stopped (SIGTERM) once about half the rollouts
#             are written, on a slow fake model: a partial run as a killed job leaves it
# Each holds NeMo Gym's rollouts, failures sidecar, materialized inputs and metrics. Beside them:
# data.jsonl, head_config.yaml (the servers of the stack's config; machine paths left out) and
# recording.json (versions and commands). NeMo Gym 0.7.0 writes no run manifest of its own.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stack="${NG_SCRIPTS:-$here/../../../shared/nemo_gym}"
export NG_HOME="${NG_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ngreal}"
golden="$here/golden"
py="$NG_HOME/venv/bin/python"
[[ -x "$stack/start_stack.sh" ]] || { echo "no NeMo Gym stack scripts at $stack (set NG_SCRIPTS)" >&2; exit 2; }
[[ -x "$py" ]] || { echo "NeMo Gym is not installed: run $stack/install.sh" >&2; exit 2; }

work="$(mktemp -d)"
trap '"$stack/stop_stack.sh" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

start() {  # start the stack with FAKE_DELAY_MS=$1; its KEY=VALUE lines become variables
    eval "$(FAKE_DELAY_MS="$1" "$stack/start_stack.sh")"
}
files() {  # keep the four artifacts of a collector's output in golden/$1
    rm -rf "${golden:?}/$1" && mkdir -p "$golden/$1"
    for suffix in "" _failures _materialized_inputs; do cp "$work/$1/rollouts$suffix.jsonl" "$golden/$1/"; done
    if [[ -f "$work/$1/rollouts_aggregate_metrics.json" ]]; then cp "$work/$1/rollouts_aggregate_metrics.json" "$golden/$1/"; fi
}

start 0
mkdir -p "$golden"
python3 "$stack/make_arith.py" 20 "$work/data.jsonl" >/dev/null
echo '{"responses_create_params": {"input": "What is 1 + 1?", "temperature": "hot"}, "expected_answer": "2", "task_id": "bad-params"}' \
    >>"$work/data.jsonl"
cp "$work/data.jsonl" "$golden/data.jsonl"
"$py" - "$HEAD_URL" "$golden/head_config.yaml" <<'EOF'
import json, sys, urllib.request
import yaml
config = yaml.safe_load(json.loads(urllib.request.urlopen(sys.argv[1] + "/global_config_dict_yaml", timeout=10).read()))
kinds = ("responses_api_agents", "environment_servers", "resources_servers", "responses_api_models")
servers = {name: entry for name, entry in config.items() if isinstance(entry, dict) and any(k in entry for k in kinds)}
with open(sys.argv[2], "w") as out:
    yaml.safe_dump({**servers, "head_server": config["head_server"]}, out, sort_keys=False)
EOF

sidecar=+route_failures_to_sidecar=true
"$stack/collect_with_gym.sh" "$work/data.jsonl" "$work/agent/rollouts.jsonl" 2 "$sidecar" >/dev/null
files agent
"$stack/collect_with_gym.sh" "$work/data.jsonl" "$work/legacy/rollouts.jsonl" 2 "$sidecar" \
    +environment_routing_mode=legacy "+environment_server_name=$ENV_SERVER_NAME" >/dev/null
files legacy

# The partial run: two rollouts at a time on a model that takes 400 ms, stopped half way through.
"$stack/stop_stack.sh" >/dev/null
start 400
"$stack/collect_with_gym.sh" "$work/data.jsonl" "$work/partial/rollouts.jsonl" 2 "$sidecar" --concurrency 2 \
    >/dev/null 2>&1 &
collector=$!
for _ in $(seq 600); do
    [[ -f "$work/partial/rollouts.jsonl" ]] && (( $(wc -l <"$work/partial/rollouts.jsonl") >= 20 )) && break
    sleep 0.1
done
kill -TERM "$collector"
wait "$collector" || true
files partial
done_rows=$(wc -l <"$golden/partial/rollouts.jsonl")
(( done_rows > 0 && done_rows < 40 )) || { echo "the partial run wrote $done_rows of 42 rollouts" >&2; exit 1; }

"$py" - "$golden/recording.json" <<'EOF'
import datetime, importlib.metadata, json, platform, sys
json.dump(
    {
        "nemo_gym": importlib.metadata.version("nemo-gym"),
        "python": platform.python_version(),
        "recorded": datetime.date.today().isoformat(),
        "data": "make_arith.py 20 (../shared/nemo_gym) and a row the agent refuses, 2 repeats seeded (+num_repeats_add_seed=true)",
        "agent": "gym eval run --no-serve --agent string_match_simple_agent +route_failures_to_sidecar=true",
        "legacy": "the same, +environment_routing_mode=legacy +environment_server_name=string_match_environment_server",
        "partial": "the agent run with --concurrency 2 on a 400 ms fake model, stopped with SIGTERM part way",
    },
    open(sys.argv[1], "w"),
    indent=2,
)
EOF
echo "recorded NeMo Gym's artifacts in $golden (partial: $done_rows of 42 rollouts)"
