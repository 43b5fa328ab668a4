"""Sending rollouts: the dispatcher process, its channel to pytest, one /run attempt, health checks."""
