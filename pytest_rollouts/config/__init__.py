"""What a run is asked to do: settings, suite declarations, routing, head-server discovery, embedded agents."""
