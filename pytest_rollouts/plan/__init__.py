"""Planning: dataset rows to the rollouts a run dispatches (numbering, manifest, materialization, resume)."""
