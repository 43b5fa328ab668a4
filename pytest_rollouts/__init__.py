"""pytest-rollouts: collect LLM agent rollouts as pytest items and score them honestly.

Kept empty on purpose: pytest imports this package in every session through the
``pytest11`` entry point, and a session that does not use rollouts must not pay for
aiohttp or pydantic.
"""
