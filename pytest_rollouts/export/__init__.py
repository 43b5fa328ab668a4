"""What a run tells systems outside it: OpenTelemetry spans, and its metrics and files logged to
Weights & Biases or MLflow.

Each integration is an optional extra, imported only when a run uses it (``docs/observability.md``).
The pytest session's end (``pytest/finish.py``) and the Python API (``runner.py``) call in here;
nothing here imports pytest.
"""
