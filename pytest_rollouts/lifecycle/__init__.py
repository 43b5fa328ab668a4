"""A run's lifecycle, written once for every front door (a pytest session, the Python API, the
``aggregate`` command): prepare the files, dispatch, score, conclude and publish.

A door only adapts its input (pytest's hooks, a config, a command line) and renders what comes
out (a terminal section, a result object, printed lines); the order of the stages and what a
refusal or a stop leaves behind are decided here. Pytest-free, above scoring, the report and the
exports, below the doors.
"""
