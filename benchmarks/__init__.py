"""Benchmarks: ``python -m benchmarks SUBCOMMAND`` (:data:`benchmarks.__main__.SUBCOMMANDS`; ``--help`` lists them).

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> list[dict]``: it prints
its own table and returns the records that ``--json PATH`` writes.
"""
