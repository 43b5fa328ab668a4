"""Rows and their stamps: the _ng_* fields, materialization, episodes, resume decisions, shards, manifest."""
