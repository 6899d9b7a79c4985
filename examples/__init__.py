"""Examples that ship with xcache: ``decode_loop.py`` (a numpy MoE decode
embedding the cache) and ``tinycache/`` (a small expert cache written apart
from the engine, with the adapter the gate judges it through).

``xcache-data`` prints where they are installed.
"""
