"""The time lab's machine: a disk model and a compute model, read from a model file.

A *tier* is where a read is served from -- the device, or the page cache --
described at queue depths ``q = 1, 2, ...`` by a latency and an aggregate
bandwidth.  A request of ``s`` bytes issued while ``q`` reads are in flight
on its tier takes

    tau(q, s) = latency(q) + q * s / bandwidth(q)

seconds: ``q`` requests of ``s`` bytes share ``bandwidth(q)`` bytes per
second, each paying ``latency(q)`` once.  Between the depths the table gives,
both are interpolated linearly; past the deepest one they stay at its value
(the tier is saturated: each extra request waits its share).  The disk model
is the two tiers and ``page_cache_share``, the share of reads the page cache
serves.

A tier also has ``own_read_factor``: a read the consumer makes itself (a
synchronous miss, a kept miss) takes that many times a reader's at the same
depth (default 1); ``compute_factor``: the consumer's compute takes that
many times its own seconds while a reader's read of this tier is in flight
(the readers' copies and completions take part of its core, or of the
memory bandwidth it shares with them; default 1, free overlap); and
optionally a second curve, ``waiting``, for the
readers while the consumer is blocked waiting on one of their reads (it
then leaves its core to them).  The main curve is the readers' while the
consumer computes -- the steady state of a decode.  Without ``waiting`` the
main curve serves both.

The compute model: ``expert_s`` seconds of compute per expert used,
``layer_s`` of non-expert work per (token, layer) step (attention, the
router), and ``access_s`` of cache overhead per expert handed over (a hit's
hold and release, a prefetch call's key).  The engine's calls cost the
consumer more than their keys (all default 0, so a file without them
models free calls): ``stream_s`` per ``stream`` call and ``stream_key_s``
per expert a stream hands over (beyond ``access_s``), ``prefetch_s`` per
``prefetch`` call, ``queue_s`` per read the consumer queues on the readers
(reserving its slot, waking a reader), ``reserve_s`` per read it queues
with every reader already busy (reserving its slot, queueing it: no
wake-up), and ``wake_s``, the delay between
the end of a reader's read and the consumer waiting on it running again.

A model file is JSON or TOML (by its extension; ``.json`` otherwise)::

    {"expert_bytes": 131072,
     "page_cache_share": 0.0,
     "device":     {"qd": [1, 2, 4], "latency_s": [...], "bandwidth_Bps": [...],
                    "own_read_factor": 1.0, "compute_factor": 1.0,
                    "waiting": {"qd": [1, 2, 4], "latency_s": [...],
                                "bandwidth_Bps": [...]}},
     "page_cache": {"qd": [1, 2],    "latency_s": [...], "bandwidth_Bps": [...]},
     "compute": {"expert_s": 1e-4, "layer_s": 0.0, "access_s": 2e-6,
                 "stream_s": 5e-6, "stream_key_s": 4e-6, "prefetch_s": 3e-6,
                 "queue_s": 4e-6, "wake_s": 1e-5, "reserve_s": 3e-6},
     "source": {...free text: how and where it was measured...}}

:func:`load_model` refuses a file that is not one (one line naming the file
and the field); :func:`write_model` writes one.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

#: The tiers a read can be served from, in the order results name them.
TIERS = ("device", "page_cache")
#: The compute model's fields, each seconds (``Compute``).
COMPUTE_FIELDS = ("expert_s", "layer_s", "access_s", "stream_s", "stream_key_s",
                  "prefetch_s", "queue_s", "wake_s", "reserve_s")
#: The model the lab uses when no ``--model`` is given (an NVMe drive's shape).
DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "nvme.json"


class ModelError(ValueError):
    """A model file, or a value in one, is not usable; the message names it."""


@dataclass(frozen=True)
class Tier:
    """One tier's latency and aggregate bandwidth at each queue depth."""

    qd: tuple[int, ...]
    latency_s: tuple[float, ...]
    bandwidth_Bps: tuple[float, ...]
    own_read_factor: float = 1.0
    waiting: Tier | None = None
    compute_factor: float = 1.0

    def __post_init__(self) -> None:
        for name in ("own_read_factor", "compute_factor"):
            f = getattr(self, name)
            if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
                raise ModelError(f"{name} {f!r}: not a factor > 0")
        n = len(self.qd)
        if n == 0 or len(self.latency_s) != n or len(self.bandwidth_Bps) != n:
            raise ModelError("qd, latency_s and bandwidth_Bps need one value "
                             "each per queue depth (at least one)")
        if list(self.qd) != sorted(set(self.qd)) or self.qd[0] < 1:
            raise ModelError(f"qd {list(self.qd)}: depths must rise from 1 up")
        for lat, bw in zip(self.latency_s, self.bandwidth_Bps, strict=True):
            if not (math.isfinite(lat) and lat >= 0):
                raise ModelError(f"latency_s {lat}: not a time >= 0")
            if not (math.isfinite(bw) and bw > 0):
                raise ModelError(f"bandwidth_Bps {bw}: not a rate > 0")

    def at(self, q: float) -> tuple[float, float]:
        """(latency, aggregate bandwidth) at queue depth ``q`` (interpolated)."""
        qd = self.qd
        if q <= qd[0]:
            return self.latency_s[0], self.bandwidth_Bps[0]
        if q >= qd[-1]:
            return self.latency_s[-1], self.bandwidth_Bps[-1]
        i = bisect.bisect_right(qd, q)
        w = (q - qd[i - 1]) / (qd[i] - qd[i - 1])
        lat = self.latency_s[i - 1] + w * (self.latency_s[i] - self.latency_s[i - 1])
        bw = (self.bandwidth_Bps[i - 1]
              + w * (self.bandwidth_Bps[i] - self.bandwidth_Bps[i - 1]))
        return lat, bw

    def while_waiting(self) -> Tier:
        """The readers' curve while the consumer waits: ``waiting``, else this one."""
        return self.waiting if self.waiting is not None else self

    def tau(self, q: int, size: int) -> float:
        """Seconds one request of ``size`` bytes takes with ``q`` in flight."""
        lat, bw = self.at(q)
        return lat + q * size / bw

    def throughput(self, q: int, size: int) -> float:
        """Bytes per second ``q`` requests of ``size`` in flight deliver together."""
        return q * size / self.tau(q, size)


@dataclass(frozen=True)
class Compute:
    """Seconds per expert, per step of non-expert work, per cache access and call."""

    expert_s: float = 0.0
    layer_s: float = 0.0
    access_s: float = 0.0
    stream_s: float = 0.0
    stream_key_s: float = 0.0
    prefetch_s: float = 0.0
    queue_s: float = 0.0
    wake_s: float = 0.0
    reserve_s: float = 0.0

    def __post_init__(self) -> None:
        for name in COMPUTE_FIELDS:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ModelError(f"compute.{name} {v!r}: not a time >= 0")


@dataclass(frozen=True)
class Machine:
    """The disk and compute model of one machine (what a model file holds)."""

    device: Tier
    page_cache: Tier
    compute: Compute = field(default_factory=Compute)
    page_cache_share: float = 0.0
    expert_bytes: int = 131072
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.page_cache_share <= 1.0:
            raise ModelError(f"page_cache_share {self.page_cache_share}: "
                             "not a share in [0, 1]")
        if int(self.expert_bytes) < 1:
            raise ModelError(f"expert_bytes {self.expert_bytes}: not a size >= 1")

    def tier(self, name: str) -> Tier:
        """The tier called ``name`` (one of :data:`TIERS`)."""
        return self.device if name == "device" else self.page_cache

    def with_(self, **changes: Any) -> Machine:
        """A copy with ``changes`` (``expert_s=...`` and friends go to compute)."""
        comp = {k: changes.pop(k) for k in COMPUTE_FIELDS
                if k in changes and changes[k] is not None}
        changes = {k: v for k, v in changes.items() if v is not None}
        if comp:
            changes["compute"] = replace(self.compute, **comp)
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The model as a model file's mapping."""
        out: dict[str, Any] = {"expert_bytes": int(self.expert_bytes),
                               "page_cache_share": self.page_cache_share}
        for name in TIERS:
            t = self.tier(name)
            out[name] = {"qd": list(t.qd), "latency_s": list(t.latency_s),
                         "bandwidth_Bps": list(t.bandwidth_Bps),
                         "own_read_factor": t.own_read_factor,
                         "compute_factor": t.compute_factor}
            if t.waiting is not None:
                w = t.waiting
                out[name]["waiting"] = {"qd": list(w.qd),
                                        "latency_s": list(w.latency_s),
                                        "bandwidth_Bps": list(w.bandwidth_Bps)}
        out["compute"] = asdict(self.compute)
        out["source"] = dict(self.source)
        return out


def _tier(data: Any, where: str) -> Tier:
    """A :class:`Tier` from a mapping; ModelError naming ``where``."""
    if not isinstance(data, dict):
        raise ModelError(f"{where}: not a table of qd, latency_s, bandwidth_Bps")
    waiting = data.get("waiting")
    wait_tier = _tier(waiting, f"{where}: waiting") if waiting is not None else None
    try:
        return Tier(tuple(int(q) for q in data["qd"]),
                    tuple(float(x) for x in data["latency_s"]),
                    tuple(float(x) for x in data["bandwidth_Bps"]),
                    float(data.get("own_read_factor", 1.0)), wait_tier,
                    float(data.get("compute_factor", 1.0)))
    except KeyError as e:
        raise ModelError(f"{where}: no {e.args[0]}") from None
    except (TypeError, ValueError, OverflowError) as e:  # int(inf): Overflow
        raise ModelError(f"{where}: {e}") from None


def _expert_bytes(v: Any) -> int:
    """A model file's ``expert_bytes``: a whole number in 1..MAX_EXPERT_BYTES."""
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_EXPERT_BYTES:
        shown = v if isinstance(v, (int, float)) and abs(v) < 1e30 else type(v).__name__
        raise ModelError(f"expert_bytes: {shown} is not a whole number in "
                         f"1..{MAX_EXPERT_BYTES}")
    return v


def machine_from(data: Any, where: str = "model") -> Machine:
    """A :class:`Machine` from a model file's mapping; ModelError naming the field."""
    if not isinstance(data, dict):
        raise ModelError(f"{where}: not a table")
    comp = data.get("compute", {})
    if not isinstance(comp, dict):
        raise ModelError(f"{where}: compute is not a table")
    unknown = set(comp) - set(COMPUTE_FIELDS)
    if unknown:
        raise ModelError(f"{where}: compute has unknown field {sorted(unknown)[0]}")
    try:
        compute = Compute(**{k: float(v) for k, v in comp.items()})
        return Machine(_tier(data.get("device"), f"{where}: device"),
                       _tier(data.get("page_cache"), f"{where}: page_cache"),
                       compute, float(data.get("page_cache_share", 0.0)),
                       _expert_bytes(data.get("expert_bytes", 131072)),
                       dict(data.get("source", {})))
    except ModelError as e:
        if str(e).startswith(where):
            raise
        raise ModelError(f"{where}: {e}") from None
    except (TypeError, ValueError) as e:
        raise ModelError(f"{where}: {e}") from None


#: The largest model file read (the shipped ones are about 2 KiB).
MAX_MODEL_BYTES = 1 << 20
#: The largest expert a model file or --expert-bytes names (1 TiB).
MAX_EXPERT_BYTES = 1 << 40


def load_model(path: str | os.PathLike[str] | None = None) -> Machine:
    """The model in ``path`` (JSON, or TOML by extension); the default one if None."""
    from xcache.oracle.bounded import load_document  # noqa: PLC0415

    p = Path(path) if path is not None else DEFAULT_MODEL
    try:  # the one reader: a regular file, bounded in size and depth
        data = load_document(p, max_bytes=MAX_MODEL_BYTES)
    except OSError as e:
        raise ModelError(f"model {p}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise ModelError(f"model {e}") from None
    return machine_from(data, f"model {p}")


def write_model(machine: Machine, path: str | os.PathLike[str],
                option: str = "--calibrate") -> None:
    """Write ``machine`` to ``path`` as JSON, whole or not at all.

    Through the one writer (``fixtures.ownership.write_file``): only a new
    file, or a model file this lab calibrated (:func:`is_calibrated`), is
    replaced.
    """
    from xcache.fixtures.ownership import write_file  # noqa: PLC0415

    text = json.dumps(machine.to_dict(), indent=2) + "\n"
    write_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"),
               option=option, is_ours=is_calibrated, what=CALIBRATED)


#: What a model file ``--calibrate`` may replace is.
CALIBRATED = "model file written by --calibrate"


def is_calibrated(path: Path) -> bool:
    """Whether ``path`` is a model file a calibration wrote (its ``source`` says)."""
    try:
        m = load_model(path)
    except ModelError:
        return False
    return "calibrated" in m.source
