"""Benchmarks: ``python -m benchmarks {cost,metrics,callback,faithfulness}``.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> list[dict]``: it prints
its own table and returns the records that ``--json PATH`` writes.
"""
