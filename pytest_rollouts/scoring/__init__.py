"""From rows on disk to a score: coverage accounting, metrics, /aggregate_metrics, gates, shard merge."""
