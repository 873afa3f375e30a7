"""Shared test setup: every test may rely on the project root being importable, and on ebbdb's own
pytest plugin (tests/e2e build on its fixtures). Installed, the plugin loads by its entry point
under the same name; this line makes a checkout that is not installed load it too."""

pytest_plugins = ["ebbdb.server.pytest_plugin"]
