"""The independent reference: pure Python + numpy, never imports ``engine``.

- ``oracle.safetensors``: a validating safetensors reader (DESIGN §3);
- ``oracle.cache``: a model of the cache, exactly per docs/CACHE.md;
- ``oracle.sim``: the offline policy simulator (plain / step, Belady);
- ``oracle.policies``: one module per eviction policy behind a registry with
  the engine's spec grammar, shared by both;
- ``oracle.traces``: routing-trace importers and analyses;
- ``oracle.errors``: the exceptions, one per engine error family.
"""
