"""Dated price tables and their loader (issue 5)."""
