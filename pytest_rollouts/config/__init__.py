"""What a run is asked to do: settings, suite declarations, routing, head-server discovery, embedded agents."""

# A suite's declaration: which files of its directory are datasets, and who serves them. Here, in
# the package's light ``__init__``, so the plugin checks file names without importing pydantic.
DECLARATION = "rollouts.toml"
