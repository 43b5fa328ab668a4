"""Files: JSONL reading and appending, a run's artifacts and their lifecycle, the output lock."""
