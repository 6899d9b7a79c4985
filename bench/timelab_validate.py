"""The time lab against the live engine: predicted vs measured seconds per token.

For each shipped trace (``--traces``), a container of its shape is written
in ``TMPDIR`` (every expert one contiguous 4 KiB-aligned run of
``--expert-kib`` KiB), and the live :class:`engine.ExpertCache` replays
the trace's first ``--tokens`` tokens through the time lab's decode loop
(:class:`lab.timing.live.LiveDecoder`: the same calls the model makes, a
busy loop per expert and per step as the compute) for every configuration
of :data:`CONFIGS` -- synchronous; read-ahead with 1 and 2 threads;
split thresholds 1-4; lookahead off, ``previous`` and ``oracle`` -- at two
cache sizes, from the page cache (the file read once before) and from the
device (the container opened with O_DIRECT).  The model predicts each from
a calibration made at the start of the same run (``replay.py time
--calibrate``'s measurement, :func:`lab.timing.calibrate.calibrate`) and
the measured cost of the busy loops, with the outcomes the lab computes;
the live cache's counters are compared with the model's.

Two predictions per configuration: the *idle model* (each depth's best
calibration round and the busy loops' undisturbed cost: the machine as if
nobody else ran) and the *as-loaded model* (the same disk, and the compute
scaled by the compute-only probe arm of the same run, which times the busy
loops alone in turn with the configurations, fastest round per chunk as
theirs: the share of a core the run really had).  Neither is fitted to the
configurations.

The machine is shared, so the arms take turns: within a round every
configuration has its own cache and they run ``--chunk`` tokens each in a
rotating order; an arm's measured time is the sum over chunks of its
fastest of ``--rounds`` rounds (bursts of other work fall on all arms
alike, and the fastest round is the one least disturbed).  The load
average is printed before and after.

Usage: ``python bench/timelab_validate.py [--tokens N] [--rounds R]
[--chunk C] [--expert-kib K] [--traces A,B] [--sources page-cache,device]
[--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xcache.engine import Container  # noqa: E402
from xcache.lab.predict.evaluate import predictions, steps_of  # noqa: E402
from xcache.lab.predict.predictors import make_predictor  # noqa: E402
from xcache.lab.timing.calibrate import (  # noqa: E402
    calibrate,
    compute_factor,
    spin,
    spin_cost,
    write_container,
)
from xcache.lab.timing.events import Schedule, run_schedule  # noqa: E402
from xcache.lab.timing.live import LiveDecoder, open_live_cache  # noqa: E402
from xcache.lab.timing.outcomes import replay_outcomes  # noqa: E402
from xcache.lab.timing.sweep import steps_window  # noqa: E402
from xcache.oracle.traces import load_trace  # noqa: E402

TRACES = Path(os.environ.get("XC_TRACES_DIR") or ROOT / "fixtures" / "traces")
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
#: The configurations validated, each a schedule.
CONFIGS = (Schedule(0), Schedule(1, split=1), Schedule(2, split=1),
           Schedule(2, split=2), Schedule(2, split=3), Schedule(2, split=4),
           Schedule(2, split=1, predictor="previous"),
           Schedule(2, split=1, predictor="oracle"))
#: Cache sizes per trace, as fractions of its experts.
FRACTIONS = (0.0625, 0.25)
#: The compute model's terms that are the consumer's CPU time (scaled by the
#: probe's share of a core in the as-loaded model).
CPU_TERMS = ("access_s", "stream_s", "stream_key_s", "prefetch_s", "queue_s",
             "reserve_s")
#: Compute per expert and per step by source (nominal busy-loop seconds).
COMPUTE = {"page-cache": (40e-6, 40e-6), "device": (300e-6, 100e-6)}


def write(path: Path, n_layers: int, n_experts: int, size: int) -> None:
    """One shard of the trace's experts, each one contiguous ``size`` run."""
    header, off = {}, 0
    for layer in range(n_layers):
        for e in range(n_experts):
            header[TEMPLATE.format(layer=layer, expert=e, tensor="w")] = {
                "dtype": "U8", "shape": [size], "data_offsets": [off, off + size]}
            off += size
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 4096)
    block = os.urandom(size)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for _ in range(n_layers * n_experts):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


class ComputeOnly:
    """The probe arm: the decode loop's busy loops alone, no cache.

    Its measured time over the model's compute time is how much of a core
    the run really had (1.0 on an idle machine).
    """

    def __init__(self, steps, expert_s: float, layer_s: float) -> None:
        self.steps, self.expert_s, self.layer_s = steps, expert_s, layer_s

    def run(self, start: int, stop: int) -> float:
        """Busy-loop steps ``start..stop-1`` as the decoder would; wall seconds."""
        t0 = time.perf_counter()
        for i in range(start, stop):
            spin(self.layer_s)
            for _ in self.steps[i].experts:
                spin(self.expert_s)
        return time.perf_counter() - t0


def kernel_factor(tmp: Path, size: int, direct: bool, nominal: float) -> float:
    """The kernel's cost while readers read over alone, at ``nominal`` seconds.

    :func:`lab.timing.calibrate.compute_factor` on a one-layer container of
    256 experts of ``size`` (O_DIRECT when ``direct``, else read once so the
    page cache serves it): the calibration's measurement at the kernel
    seconds this source's configurations use.
    """
    path = tmp / f"factor-{size}.safetensors"
    if not path.exists():
        write_container(path, 256, size)
    if not direct:
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    cont = Container(str(path), direct=direct)
    try:
        drop = None if direct or cont.direct_active else path
        return compute_factor(cont, 128, nominal, drop)
    finally:
        cont.close()


def measure(cont: Container, trace, steps, outcomes, slots: int, expert_s: float,
            layer_s: float, rounds: int, chunk_steps: int) -> list[dict]:
    """Each configuration's fastest-per-chunk seconds and its live counters.

    The last entry is the compute-only probe's.
    """
    starts = list(range(0, len(steps), chunk_steps))
    arms = len(CONFIGS) + 1
    fastest = [[float("inf")] * len(starts) for _ in range(arms)]
    counters: list[dict] = [{} for _ in range(arms)]
    for rnd in range(rounds):
        decs = []
        for sch in CONFIGS:
            out = outcomes[sch.predictor]
            cache = open_live_cache(cont, sch, slots, "lru", trace.n_layers,
                                    trace.n_experts, trace.top_k, TEMPLATE, ("w",))
            decs.append(LiveDecoder(cache, steps, sch, out.spec, expert_s, layer_s))
        probe = ComputeOnly(steps, expert_s, layer_s)
        for j, a in enumerate(starts):
            b = min(a + chunk_steps, len(steps))
            turn = (j + rnd) % arms
            for k in list(range(turn, arms)) + list(range(turn)):
                if k == len(CONFIGS):
                    fastest[k][j] = min(fastest[k][j], probe.run(a, b))
                    continue
                fastest[k][j] = min(fastest[k][j], decs[k].run(a, b))
                decs[k].cache.drain()
        for k, d in enumerate(decs):
            counters[k] = d.close()
    return [{"seconds": sum(f), "live": c} for f, c in zip(fastest, counters,
                                                          strict=True)]


def main(argv: list[str] | None = None) -> int:
    """Calibrate, replay every configuration live and in the model, print both."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=4, help="tokens per turn")
    ap.add_argument("--expert-kib", type=int, default=128)
    ap.add_argument("--traces", default="olmoe_299.jsonl,mixtral8x7b_humaneval.jsonl")
    ap.add_argument("--sources", default="page-cache,device")
    ap.add_argument("--json", default=None, metavar="FILE")
    ns = ap.parse_args(argv)
    size = ns.expert_kib * 1024
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
          f"({os.cpu_count()} cpus)")
    print("calibrating the disk model ...", flush=True)
    machine = calibrate(size, 1e-4, 0.0, os.environ.get("TMPDIR"),
                        say=lambda s: None)
    for name in ("device", "page_cache"):
        t = machine.tier(name)
        print(f"  {name}: MB/s at {size} B: " + ", ".join(
            f"qd {q} {t.throughput(q, size) / 1e6:.0f}" for q in t.qd))
        w = t.while_waiting()
        print(f"  {name}: MB/s at {size} B (consumer waiting): " + ", ".join(
            f"qd {q} {w.throughput(q, size) / 1e6:.0f}" for q in w.qd))
    c = machine.compute
    print("  own reads (a synchronous miss over a reader's): " + ", ".join(
        f"{name} x{machine.tier(name).own_read_factor:.2f}"
        for name in ("device", "page_cache")))
    print(f"  access {c.access_s * 1e6:.2f} us; calls: stream {c.stream_s * 1e6:.2f}"
          f" + {c.stream_key_s * 1e6:.2f}/key, prefetch {c.prefetch_s * 1e6:.2f}, "
          f"queue {c.queue_s * 1e6:.2f}, reserve {c.reserve_s * 1e6:.2f}, "
          f"wake {c.wake_s * 1e6:.2f} us")
    results = []
    factors: dict[tuple[str, float], float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="xc-tlv-", dir=os.environ.get("TMPDIR")))
    try:
        for tname in ns.traces.split(","):
            trace = load_trace(TRACES / tname)
            all_steps, _ = steps_of(trace)
            _, steps, n_tok = steps_window(all_steps, ns.tokens, 0.0)
            path = tmp / f"{trace.n_layers}x{trace.n_experts}.safetensors"
            write(path, trace.n_layers, trace.n_experts, size)
            n_keys = trace.n_layers * trace.n_experts
            for source in ns.sources.split(","):
                direct = source == "device"
                if not direct:
                    with open(path, "rb") as f:
                        while f.read(1 << 24):
                            pass
                cont = Container(str(path), direct=direct)
                if direct and not cont.direct_active:
                    print(f"{tname} device: skipped ({cont.direct_note})")
                    cont.close()
                    continue
                ex_nom, layer_nom = COMPUTE[source]
                ex_s, layer_s = spin_cost(ex_nom), spin_cost(layer_nom)
                share = 0.0 if direct else 1.0
                tier = "device" if direct else "page_cache"
                if (source, ex_nom) not in factors:
                    factors[(source, ex_nom)] = kernel_factor(tmp, size, direct,
                                                              ex_nom)
                f = factors[(source, ex_nom)]
                machine = replace(machine, **{tier: replace(machine.tier(tier),
                                                            compute_factor=f)})
                m = machine.with_(expert_s=ex_s, layer_s=layer_s,
                                  page_cache_share=share)
                for frac in FRACTIONS:
                    slots = max(trace.top_k + 1, round(frac * n_keys))
                    outcomes = {}
                    for pred in {s.predictor for s in CONFIGS}:
                        plan = (predictions(make_predictor(pred, trace.n_layers,
                                                           trace.n_experts,
                                                           trace.top_k), [], steps)
                                if pred else None)
                        outcomes[pred] = replay_outcomes(
                            steps, trace.n_layers, trace.n_experts, trace.top_k,
                            slots, "lru", plan, trace.top_k if plan else 0)
                    runs = measure(cont, trace, steps, outcomes, slots, ex_s,
                                   layer_s, ns.rounds,
                                   ns.chunk * trace.n_layers)
                    compute = (sum(len(st.experts) for st in steps) * ex_s
                               + len(steps) * layer_s) / n_tok
                    cpu = compute / (runs[-1]["seconds"] / n_tok)
                    # as loaded: compute as the probe arm measured it in this
                    # run (its fastest round per chunk, as every arm's)
                    # (the consumer's CPU terms; wake_s is a delay, kept)
                    m_loaded = machine.with_(
                        expert_s=ex_s / cpu, layer_s=layer_s / cpu,
                        page_cache_share=share,
                        **{k: getattr(machine.compute, k) / cpu
                           for k in CPU_TERMS})
                    print(f"{tname} {source} {slots} slots "
                          f"(expert {ex_s * 1e6:.0f} us, layer "
                          f"{layer_s * 1e6:.0f} us; compute-only probe: "
                          f"{cpu:.2f} of a core; compute while reading "
                          f"x{f:.3f}):")
                    for sch, run in zip(CONFIGS, runs[:-1], strict=True):
                        out = outcomes[sch.predictor]
                        sch_b = Schedule(sch.threads, sch.depth, sch.split,
                                         sch.predictor, trace.top_k)
                        pred_t = run_schedule(steps, out, sch_b, m, trace.n_layers,
                                              n_tok)
                        meas = run["seconds"] / n_tok
                        live = run["live"]
                        pred_l = run_schedule(steps, out, sch_b, m_loaded,
                                              trace.n_layers, n_tok)["s_per_token"]
                        row = {"trace": tname, "source": source, "slots": slots,
                               "config": sch.name, "predicted_s": pred_t["s_per_token"],
                               "measured_s": meas,
                               "ratio": pred_t["s_per_token"] / meas,
                               "model_misses": out.counters["misses"],
                               "live_misses": int(live["misses"]),
                               "live_device_loads": int(live["device_loads"]),
                               "live_page_cache_loads": int(live["page_cache_loads"]),
                               "model_wait_s": pred_t["wait_s"],
                               "model_compute_s": pred_t["compute_s"],
                               "probe_core_share": cpu,
                               "compute_factor": f,
                               "model_contention_s": pred_t["contention_s"],
                               "predicted_loaded_s": pred_l,
                               "ratio_loaded": pred_l / meas}
                        results.append(row)
                        p_ms = row["predicted_s"] * 1e3
                        print(f"  {sch.name:18s} predicted {p_ms:8.2f}"
                              f" ms/token, measured {meas * 1e3:8.2f}, ratio "
                              f"{row['ratio']:.3f} (as loaded {pred_l * 1e3:8.2f}, "
                              f"{row['ratio_loaded']:.3f})  misses model "
                              f"{row['model_misses']}"
                              f" live {row['live_misses']}", flush=True)
                cont.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    for source in ns.sources.split(","):
        for key, label in (("ratio", "idle model"), ("ratio_loaded", "as loaded")):
            ratios = [r[key] for r in results if r["source"] == source]
            if ratios:
                errs = [abs(x - 1) for x in ratios]
                print(f"{source} ({label}): {len(ratios)} configurations, median "
                      f"predicted/measured {statistics.median(ratios):.3f}, "
                      f"median |error| {statistics.median(errs) * 100:.1f} %, "
                      f"worst {max(errs) * 100:.1f} %, within 25 %: "
                      f"{sum(e <= 0.25 for e in errs)}/{len(errs)}")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"load_start": load0, "load_end": load1,
                                             "model": machine.to_dict(),
                                             "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
