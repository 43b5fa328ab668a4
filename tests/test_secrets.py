"""Secrets never leak: a header value or a URL password, in any channel, whatever an agent echoes."""

from __future__ import annotations

from pytest_rollouts.address import without_password


def test_a_password_is_left_out_of_any_text_holding_a_url() -> None:
    assert without_password("judge=http://u:pw@host:1/run") == "judge=http://host:1/run"
    assert without_password("http://u:pw@[::1") == "http://[::1"
    assert without_password("http://u:p/w@host") == "http://***@host", "no other host is named"
    assert without_password("http://host/run?who=a@b") == "http://***@b"
    assert without_password("http://host:1/run") == "http://host:1/run"
