"""A run's report: one self-contained HTML file (docs/report.md). Imports nothing of pytest."""

from pytest_rollouts.report.build import build_report, write_report

__all__ = ["build_report", "write_report"]
