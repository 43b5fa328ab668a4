"""Secrets never leak: a header value or a URL password, in any channel, whatever an agent echoes.

The sweep runs real sessions against agents that echo what they were sent in every way a
reply can carry it, and looks for the secrets, and for their first characters (what a value
cut in two keeps), in everything a user shares: the artifacts, the metrics file, the
terminal (``-v -rA``), junitxml, the report log, and the dispatcher's command line.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.net.address import without_password
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.rows.episodes import episode_reply
from pytest_rollouts.rows.schema import MAX_BODY_CHARS

from ..agents import Reply, ScriptedAgent
from ..helpers import aggregate, run_rollouts, write_rows

HEADER = "hdr-CANARY-7f3e9a1b2c4d"  # X-Key, sent to every agent
LONG = ("lng-CANARY-" + "9f8e7d6c5b4a" * 13)[:150]  # X-Long, sent to every agent
PASSWORD = "pw-CANARY-5d6e7f8a9b"  # in the judge's URL, sent as Basic auth
# Read from the environment, as a user keeps a key out of shell history.
HEADER_OPTION = "--rollouts-agent-header=X-Key=${ROLLOUTS_CANARY}"
BASIC = base64.b64encode(f"evals:{PASSWORD}".encode()).decode()
# Found nowhere, not even cut short: BASIC[:8] only encodes "evals:", its rest the password.
FORBIDDEN = (HEADER[:8], LONG[:8], PASSWORD[:8], BASIC[8:])
# Where the texts an agent sends are cut: the sidecar's body, the metrics note, the health message.
SIDECAR_CUT, METRICS_NOTE_CUT, HEALTH_CUT = MAX_BODY_CHARS, 200, 300


def across(cut: int, secret: str) -> bytes:
    """A body in which ``secret`` starts 8 characters before ``cut``."""
    return ("x" * (cut - 8) + secret + " and more").encode()


def dispatcher_command_lines() -> list[bytes]:
    """The command line of every dispatcher this (pytest-running) process has started, read
    while it runs: ``ps`` shows it to every user of the machine."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):  # a process that ended meanwhile
            continue
        if parent == os.getpid() and b"pytest_rollouts.dispatch.engine" in command:
            found.append(command)
    return found


MAIN_FAULTS: dict[str, Reply] = {
    "200 echo": Reply(json={"reward": 1.0, "debug": f"called with {HEADER}", "echo": {HEADER: [{HEADER: 1}]}}),
    "500 echo": Reply(status=500, json={"detail": f"key {HEADER} refused", HEADER: "as a key"}),
    "500 across the cut": Reply(status=500, raw=across(SIDECAR_CUT, HEADER)),
    "2xx non-JSON across the cut": Reply(raw=across(SIDECAR_CUT, HEADER)),
    "500 across the terminal cut": Reply(status=500, raw=across(200, HEADER)),
    # Past what is read of an error body (8600 bytes here), the 58th copy is cut in two; the 57
    # before it, redacted, take 570 characters: it would be well inside the sidecar's 2000.
    "500 repeating a long value past the read limit": Reply(status=500, raw=LONG.encode() * 60),
    "agent-classified": Reply(
        json={
            "_ng_failure_class": "timeout_exceeded",
            "failure_reason": f"gave up holding {HEADER}",
            "seen": {HEADER: True},
            "_ng_failure_response_body": across(SIDECAR_CUT, HEADER).decode(),
        }
    ),
    "agent-classified, the class echoing it": Reply(json={"_ng_failure_class": f"refused_{HEADER}"}),
    "agent-classified with its own message": Reply(
        json={"_ng_failure_class": "judge_invalid", "_ng_failure_message": f"refused {HEADER}", "reward": 0.0}
    ),
}
JUDGE_FAULTS: dict[str, Reply] = {
    "200 echoes Basic": Reply(json={"reward": 0.0, "auth": f"Basic {BASIC}", f"Basic {BASIC}": "as a key"}),
    "hang-up (retried)": Reply(reset=True),
    "429 echoes Basic (retried)": Reply(status=429, raw=f"slow down, Basic {BASIC}".encode()),
    "500 echoes the password": Reply(status=500, json={"detail": f"user evals, password {PASSWORD}: refused"}),
    "500 password across the cut": Reply(status=500, raw=across(SIDECAR_CUT, PASSWORD)),
}


def run_against_echoing_agents(pytester: pytest.Pytester) -> dict[str, str]:
    """One session over every /run and /aggregate_metrics fault; each channel's text."""
    rows: list[dict[str, Any]] = [{"responses_create_params": {"input": f}, "fault": f} for f in MAIN_FAULTS]
    rows += [{"responses_create_params": {}, "fault": f, "agent_ref": {"name": "judge"}} for f in JUDGE_FAULTS]
    write_rows(pytester.path / "data.jsonl", rows)
    command_lines: list[bytes] = []

    def main_agent(row: dict, seen: int) -> Reply:
        command_lines.extend(dispatcher_command_lines())
        return MAIN_FAULTS[row["fault"]]

    def main_metrics(body: dict) -> dict:
        return {
            "agent_metrics": {"mean/reward": 1.0, HEADER: 1.0, "echo": f"sent {HEADER}"},
            "key_metrics": {"mean/reward": 1.0},
            "group_level_metrics": [],
            "repeat_level_metrics": [],
        }

    with (
        ScriptedAgent(main_agent, aggregate=main_metrics) as main,
        ScriptedAgent(
            lambda row, seen: JUDGE_FAULTS[row["fault"]],
            aggregate=lambda body: Reply(status=500, raw=across(METRICS_NOTE_CUT, HEADER)),
        ) as judge,
    ):
        result = run_rollouts(
            pytester,
            "data.jsonl",
            "-v",
            "-rA",
            "--junitxml=j.xml",
            "-p",
            "pytest_reportlog",
            "--report-log=log.jsonl",
            f"--rollouts-agent={main.url}",
            f"--rollouts-agent=judge={judge.url.replace('http://', f'http://evals:{PASSWORD}@')}",
            HEADER_OPTION,
            "--rollouts-agent-header=X-Long=${ROLLOUTS_LONG_CANARY}",
            "--rollouts-retry-backoff=0.01",
        )
        assert {h.get("X-Key") for h in main.headers + judge.headers} == {HEADER}, "the secrets were sent"
        assert {h.get("Authorization") for h in judge.headers} == {f"Basic {BASIC}"}
    assert len(main.requests) + len(judge.requests) == len(rows) + 2 * 2, "two retries of two rollouts"
    assert command_lines, "the dispatcher's command line was read while it ran"
    out = pytester.path / "out"
    artifacts = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    assert "computed locally instead" in artifacts["r_aggregate_metrics.json"], "the metrics server's error was taken"
    return {
        **{f"artifact {name}": text for name, text in artifacts.items()},
        "terminal": "\n".join(result.outlines + result.errlines),
        "junitxml": (pytester.path / "j.xml").read_text(),
        "report log": (pytester.path / "log.jsonl").read_text(),
        "dispatcher command line": b"\n".join(command_lines).decode(errors="replace"),
    }


def run_against_a_failing_health_check(pytester: pytest.Pytester) -> str:
    write_rows(pytester.path / "one.jsonl", [{"responses_create_params": {"input": "q"}}])
    with ScriptedAgent(health=Reply(status=503, raw=across(HEALTH_CUT, HEADER))) as sick:
        result = run_rollouts(pytester, "one.jsonl", "-v", "-rA", f"--rollouts-agent={sick.url}", HEADER_OPTION)
    shown = "\n".join(result.outlines + result.errlines)
    assert "HTTP 503: xxx" in shown
    return shown


def usage_errors(pytester: pytest.Pytester) -> tuple[str, list[int]]:
    """Addresses a run or the aggregate CLI refuses, each holding the password: well-formed but
    refused (a #fragment), malformed (an unclosed IPv6 host, which the URL parser raises on), and
    a password with a '/' (which a parser reads as the start of a path). What they print, and
    their exit codes."""
    addresses = [
        f"judge=http://evals:{PASSWORD}@127.0.0.1:1#frag",
        f"http://evals:{PASSWORD}@[::1",
        f"judge=http://evals:{PASSWORD}@[::1",
        f"judge=http://evals:{PASSWORD}/x@127.0.0.1:1",
    ]
    merge = ("--input", "out/r.jsonl", "--out", "m/all.jsonl")
    # The refusal quotes every value given (``(got [...])``), each shape shown at once.
    from_cli = run_rollouts(pytester, "data.jsonl", *(f"--rollouts-agent={a}" for a in addresses))
    merged = aggregate(pytester.path, *merge, *(f"--agent={a}" for a in addresses))
    mistyped = aggregate(pytester.path, *merge, "--agnt", addresses[0])  # argparse quotes what it refuses
    pytester.makeini("[pytest]\nrollouts_agent =\n" + "".join(f"    {a}\n" for a in addresses))
    from_ini = run_rollouts(pytester, "data.jsonl")
    shown = [*from_cli.outlines, *from_cli.errlines, *from_ini.outlines, *from_ini.errlines]
    shown += [merged.stdout, merged.stderr, mistyped.stdout, mistyped.stderr]
    codes = [from_cli.ret, merged.returncode, mistyped.returncode, from_ini.ret]
    return "\n".join(shown), codes


def test_no_secret_reaches_any_channel(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path a secret can take: an agent echoing it in a reply, an error body (across each
    cut), an object key, an agent-classified failure, a transport failure; a health check's
    reply; a metrics server's reply and error; a usage error quoting an address."""
    monkeypatch.setenv("ROLLOUTS_CANARY", HEADER)
    monkeypatch.setenv("ROLLOUTS_LONG_CANARY", LONG)
    channels = run_against_echoing_agents(pytester)
    channels["terminal, failed health check"] = run_against_a_failing_health_check(pytester)
    channels["terminal, usage errors"], codes = usage_errors(pytester)
    leaks = [(channel, secret) for channel, text in channels.items() for secret in FORBIDDEN if secret in text]
    assert not leaks, "\n".join(f"{secret!r} in {channel}" for channel, secret in leaks)
    assert codes == [pytest.ExitCode.USAGE_ERROR] * len(codes), "a malformed address is refused, not a crash"
    assert "Traceback" not in channels["terminal, usage errors"]
    # Not vacuous: the echoes were written, redacted (a value, a key, a body cut after redaction).
    for name, redacted in [("r.jsonl", 2), ("r_failures.jsonl", 8), ("r_aggregate_metrics.json", 2)]:
        assert channels[f"artifact {name}"].count("[redacted]") >= redacted, name


def test_an_episode_failure_is_redacted_before_it_is_cut() -> None:
    redact = Redactor({"env": {"X-Key": HEADER}})
    text = across(SIDECAR_CUT, HEADER).decode()
    row = episode_reply({"episode_id": {}, "task_id": {}, "failure": {"message": text}}, {"taskset": "t"}, redact)
    assert row["_ng_failure_message"] == "x" * (SIDECAR_CUT - 8) + "[redacte"
    assert HEADER[:8] not in row["_ng_failure_response_body"] and len(row["_ng_failure_response_body"]) == SIDECAR_CUT


def test_a_password_is_left_out_of_any_text_holding_a_url() -> None:
    assert without_password("judge=http://u:pw@host:1/run") == "judge=http://host:1/run"
    assert without_password("http://u:pw@[::1") == "http://[::1"
    assert without_password("http://u:p/w@host") == "http://***@host", "no other host is named"
    assert without_password("http://host/run?who=a@b") == "http://***@b"
    assert without_password("http://host:1/run") == "http://host:1/run"
