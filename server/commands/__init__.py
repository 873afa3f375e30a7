"""Command handlers, one module per group. Importing this package imports none of them: the
registry (server/registry.py) imports a module on the first request naming one of its commands."""
