"""The time lab: seconds per token of streaming decode, and where they go.

``python replay.py time TRACE OUTDIR [options]`` replays a routing trace
token by token and layer by layer through a discrete-event model of the
engine's decode loop: which accesses hit comes from the live cache's own
policy code (:mod:`~lab.timing.outcomes`, checked against the lab's C
simulator), reads take the time a disk model gives them and experts the
time a compute model gives them (:mod:`~lab.timing.model`, a model file),
under the engine's schedules -- synchronous, read-ahead with N threads and
depth D, the split path at threshold T, lookahead prefetch from any
predictor of ``replay.py predict`` including the oracle ceiling
(:mod:`~lab.timing.events`).  It writes ``time.csv``, ``time_layers.csv``
(each configuration's parts per layer), ``time.json`` (every configuration,
per layer too) and ``time.png`` (:mod:`~lab.timing.plot`);
:mod:`~lab.timing.sweep` runs the configurations on any executor.
``replay.py time --calibrate MODEL`` measures a machine
(:mod:`~lab.timing.calibrate`); :mod:`~lab.timing.live` is the same decode
loop on the live cache, which bench/timelab_validate.py times against the
model.  docs/DESIGN.md "The time lab" says what the model leaves out.
"""
