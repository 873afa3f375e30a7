"""Shared test setup: every test may rely on the project root being importable."""
