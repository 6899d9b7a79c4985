"""A small MoE decode loop over an expert cache: how an engine embeds xcache.

    python examples/decode_loop.py TWIN TRACE [--tokens N] [--slots N] [--no-prefetch]

TWIN is a container with experts (a twin of a real checkpoint, made by
``xcache-fixtures from-header``, or a preset made by ``xcache-fixtures
new``; a checkpoint's folder without its weights is refused in one line
saying so); TRACE is a routing trace of the same shape (layers and
experts), e.g. ``fixtures/traces/olmoe_299.jsonl`` for an OLMoE twin.  The
trace says which experts the router chose at every (token, layer); this
loop does what an engine does around those choices:

1. holds the layer's top-k in one call (``cache.hold_layer``),
2. while they are held, reads ahead the next layer's likely experts
   (``cache.prefetch``; the guess: the ones it chose for the previous token),
3. computes with the zero-copy views: a SwiGLU feed-forward per expert
   (three small matmuls), weighted by the router's softmax,
4. releases them (leaving the ``with`` block), and goes on to the next layer.

It prints tokens per second and the cache's own counters: the hit rate and
the adjusted hit rate (the hits owed to read-ahead taken out, so it says
how often an expert was resident without help).  ``main`` returns the
counters, so a test can hold the printed figures to them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from anywhere, as `python examples/...`
    sys.path.insert(0, str(ROOT))

from xcache import data, engine  # noqa: E402
from xcache.engine.layout import resolve  # noqa: E402
from xcache.oracle.traces import load_trace  # noqa: E402

#: The SwiGLU projections under the names real checkpoints give them.
ROLES = {"gate": ("gate_proj.weight", "w1.weight"),
         "up": ("up_proj.weight", "w3.weight"),
         "down": ("down_proj.weight", "w2.weight")}


def steps(trace_path: str, n_tokens: int | None) -> list[tuple[int, int, list[int]]]:
    """The trace's (token, layer, experts) steps in order, the first ``n_tokens``."""
    tr = load_trace(trace_path)
    starts = np.flatnonzero(tr.step_starts())
    ends = np.append(starts[1:], len(tr.token))
    out = []
    for s, e in zip(starts, ends, strict=True):
        if n_tokens is not None and tr.token[s] >= n_tokens:
            break
        out.append((int(tr.token[s]), int(tr.layer[s]), tr.expert[s:e].tolist()))
    return out


def as_weights(view: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 matrix an expert tensor's view holds.

    numpy has no bfloat16, so the cache shows BF16 tensors as raw bytes:
    widening each 16-bit value to the top half of a float32 decodes it.
    A twin's bytes are patterns that name their own position, not trained
    weights: as floats they take every exponent, inf and NaN too, so only
    the values in [-1, 1] are kept (the others read as 0) to keep the
    arithmetic finite; a real checkpoint needs no such step.
    """
    if view.dtype == np.uint8:  # BF16
        view = (view.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    w = view.reshape(shape)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(w) <= 1.0, w, np.float32(0.0))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Decode the trace's tokens over the twin; print and return the counters."""
    ap = argparse.ArgumentParser(prog="decode_loop.py", description=__doc__
                                 .splitlines()[0])
    ap.add_argument("twin", help="a container with experts (folder)")
    ap.add_argument("trace", type=data.path_arg("trace"),
                    help="a routing trace of the same shape, or a shipped "
                         "trace's name (xcache-data)")
    ap.add_argument("--tokens", type=int, default=None,
                    help="decode only the first N tokens (default: all)")
    ap.add_argument("--slots", type=int, default=None,
                    help="cache slots (default: half of one token's experts, "
                         "layers x top-k / 2)")
    ap.add_argument("--no-prefetch", action="store_true",
                    help="no read-ahead (compare the hit rates)")
    ap.add_argument("--io-threads", type=int, default=1,
                    help="read-ahead reader threads (0: prefetch reads at once)")
    ap.add_argument("--batch-threads", type=int, default=2,
                    help="readers of a layer's misses, the caller included")
    ns = ap.parse_args(argv)

    # The layout: which tensors make an expert, the MoE layers, top-k.  A
    # folder the engine refuses (a checkpoint without its weights: the error
    # says to make a twin) is one line and exit 2, not a traceback.
    try:
        lay = resolve(ns.twin)
    except engine.EngineError as e:
        ap.exit(2, f"{ap.prog}: {e}\n")
    todo = steps(ns.trace, ns.tokens)
    if max(la for _, la, _ in todo) >= len(lay.layers):
        ap.error(f"{ns.trace} routes {1 + max(la for _, la, _ in todo)} layers; "
                 f"{ns.twin} has {len(lay.layers)} MoE layers")
    names = {role: next((t for t in lay.tensors if t in alias), None)
             for role, alias in ROLES.items()}
    if None in names.values() or lay.fused:
        ap.error(f"{ns.twin}: experts {list(lay.tensors)} are not one "
                 f"gate/up/down (w1/w3/w2) tensor each")
    slots = ns.slots or max(len(lay.layers) * lay.top_k // 2, lay.top_k + 1)

    # The cache: the container opened, `slots` experts of room.
    try:
        cache = engine.ExpertCache.open(ns.twin, layout=lay, n_slots=slots,
                                        io_threads=ns.io_threads,
                                        batch_threads=ns.batch_threads)
    except engine.EngineError as e:
        ap.exit(2, f"{ap.prog}: {e}\n")
    with cache, engine.Container(ns.twin) as box:
        # Tensor shapes (BF16 views are flat bytes), the router, the state.
        first = lay.layers[0]
        shape = {role: box.info(lay.tensor_name(first, 0, name)).shape
                 for role, name in names.items()}
        hidden = shape["down"][0]
        rng = np.random.default_rng(0)  # a model's gate weights stand here
        router = rng.standard_normal((len(lay.layers), lay.n_experts, hidden),
                                     np.float32)
        h = rng.standard_normal(hidden).astype(np.float32)
        last: dict[int, list[int]] = {}  # the experts each layer last chose

        t0 = time.perf_counter()
        for i, (_token, li, experts) in enumerate(todo):
            layer = lay.layers[li]
            with cache.hold_layer(layer, experts) as views:
                # Read ahead while this layer computes: the next layer's
                # choice at the previous token is the guess.
                nxt = todo[i + 1][1] if i + 1 < len(todo) else None
                if nxt is not None and nxt in last and not ns.no_prefetch:
                    cache.prefetch([(lay.layers[nxt], e) for e in last[nxt]])
                # The router's weights of the chosen experts (a softmax).
                logits = router[li, experts] @ h
                weight = np.exp(logits - logits.max())
                weight /= weight.sum()
                out = np.zeros(hidden, np.float32)
                for w, v in zip(weight, views, strict=True):
                    gate, up, down = (as_weights(v[names[r]], shape[r])
                                      for r in ("gate", "up", "down"))
                    g = gate @ h
                    out += w * (down @ (g / (1.0 + np.exp(-g)) * (up @ h)))
            last[li] = experts
            h = h + out
            h /= np.sqrt(np.mean(h * h)) + 1e-6  # an RMS norm keeps h in range
        cache.drain()  # no read-ahead left under way: the counters are final
        seconds = time.perf_counter() - t0
        stats = cache.stats()

    n_tok = len({t for t, _, _ in todo})
    print(f"{ns.twin}: {len(lay.layers)} MoE layers x {lay.n_experts} experts, "
          f"top-{lay.top_k}; {slots} slots")
    print(f"decoded {n_tok} tokens in {seconds:.3f} s: {n_tok / seconds:.1f} tok/s")
    print(f"requests {stats['requests']}, hits {stats['hits']}, misses "
          f"{stats['misses']}, read-ahead loads {stats['prefetch_loads']}, "
          f"first uses of them {stats['prefetch_first_uses']}")
    print(f"hit rate {stats['hit_rate']:.4f}, adjusted hit rate "
          f"{stats['adjusted_hit_rate_exact']:.4f} (hits owed to read-ahead "
          f"taken out)")
    return stats


if __name__ == "__main__":
    main()
