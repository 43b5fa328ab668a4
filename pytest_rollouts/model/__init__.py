"""The built-in model agent: a suite's rows sent to an OpenAI-compatible model, scored by its verifier."""
