"""The independent reference: pure Python + numpy, never imports ``engine``.

- ``oracle.safetensors``: a validating safetensors reader (docs/DESIGN.md §3);
- ``oracle.cache``: a model of the cache, exactly per docs/CACHE.md;
- ``oracle.sim``: the offline policy simulator (plain / step, Belady);
- ``oracle.policies``: one module per eviction policy behind a registry with
  the engine's spec grammar, shared by both;
- ``oracle.traces``: the ``Trace`` type, trace readers and writers;
- ``oracle.trace_stats``: reuse distances, overlap and miss-ratio curves;
- ``oracle.errors``: the exceptions, one per engine error family.
"""
