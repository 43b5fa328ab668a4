"""The pytest adapter: items, the run loop, the reporter, xdist. The only code that imports pytest."""
