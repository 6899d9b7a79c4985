"""The time lab's result files: time.csv, time_layers.csv, time.json, time.png.

Written as one set into OUTDIR by the one writer
(``fixtures.ownership.install_set``): an earlier set is replaced only when
its ``time.json`` is the time lab's record.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import uuid
from pathlib import Path
from typing import Any

#: The files of one run, written as a set.
RESULT_FILES = ("time.csv", "time_layers.csv", "time.json", "time.png")
#: What marks the time lab's own set in OUTDIR: ``time.json``, its record.
TIME_RECORD = ("time.json", frozenset({"trace", "model", "results"}))
TIME_WHAT = "time lab result set (time.json marks one)"


def time_set_ours(folder: Path) -> bool:
    """Whether ``folder`` holds the time lab's own result set (its record)."""
    from xcache.lab.summary import set_record  # noqa: PLC0415

    return set_record(*TIME_RECORD)(folder)


#: Columns of time_layers.csv: a configuration's parts at one layer, per token.
LAYER_COLUMNS = ("config", "page_cache_share", "expert_s", "layer", "compute_s",
                 "wait_s", "hidden_s", "wasted_s")


def _base_of(rows: list[dict[str, Any]], r: dict[str, Any]) -> dict[str, Any] | None:
    """The row that differs from lookahead row ``r`` only in having no lookahead."""
    same = ("policy", "slots", "threads", "depth", "split", "expert_s",
            "page_cache_share", "expert_bytes")
    return next((b for b in rows if b["predictor"] == "none"
                 and all(b[k] == r[k] for k in same)), None)


def lookahead_notes(rows: list[dict[str, Any]], n_tokens: int) -> list[str]:
    """Why a lookahead's rows are no faster than the same schedule without one.

    Per predictor: none issued (its rows equal the plain ones), or slower in
    some configurations -- its prefetch calls cost the consumer more compute
    than the I/O wait they remove, named with the numbers of the row where
    it lost most.  Empty when every lookahead row is faster.
    """
    notes = []
    for pred in dict.fromkeys(r["predictor"] for r in rows):
        if pred == "none":
            continue
        pairs = [(r, b) for r in rows if r["predictor"] == pred
                 for b in [_base_of(rows, r)] if b is not None]
        if not pairs:
            continue
        if all(r["spec_issued"] == 0 for r, _ in pairs):
            notes.append(f"+{pred} issued no speculative read (it guessed only "
                         "experts already resident), so its rows equal those "
                         "without a lookahead.")
            continue
        slower = [(r, b) for r, b in pairs if r["s_per_token"] > b["s_per_token"]]
        if not slower:
            continue
        r, b = max(slower, key=lambda rb: rb[0]["s_per_token"] - rb[1]["s_per_token"])
        ms = 1e3
        d_total = (r["s_per_token"] - b["s_per_token"]) * ms
        d_compute = (r["compute_s"] - b["compute_s"]) * ms
        d_wait = (b["wait_s"] - r["wait_s"]) * ms
        per_read = ((r["compute_s"] - b["compute_s"]) * n_tokens
                    / r["spec_issued"] * 1e6)
        notes.append(
            f"+{pred} is slower than no lookahead in {len(slower)} of "
            f"{len(pairs)} configurations, most in {b['config']}: "
            f"{r['s_per_token'] * ms:.3f} against {b['s_per_token'] * ms:.3f} "
            f"ms/tok (+{d_total:.3f}). Its {r['spec_issued']:,} prefetches cost "
            f"{d_compute:.3f} ms/tok more compute ({per_read:.1f} us each), "
            f"while the wait they removed was {d_wait:.3f} ms/tok: the "
            "read-ahead had already hidden those misses under compute "
            f"({b['hidden_s'] * ms:.3f} ms/tok hidden). "
            "A lookahead pays where wait is left to remove (a higher T, a "
            "slower disk), not where read-ahead leaves none.")
    return notes


def write_time_results(outdir: str, info: dict[str, Any], machine: Any,
                       rows: list[dict[str, Any]], title: str | None) -> list[str]:
    """Write time.csv, time_layers.csv, time.json and (``title``) time.png as a set."""
    from xcache.fixtures.ownership import install_set  # noqa: PLC0415
    from xcache.lab.timing.plot import plot_time  # noqa: PLC0415
    from xcache.lab.timing.sweep import COLUMNS  # noqa: PLC0415

    tag = f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staged: dict[str, str] = {}
    try:
        staged["time.csv"] = os.path.join(outdir, "time.csv" + tag)
        with open(staged["time.csv"], "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        staged["time_layers.csv"] = os.path.join(outdir, "time_layers.csv" + tag)
        with open(staged["time_layers.csv"], "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=LAYER_COLUMNS, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                for layer in r["per_layer"]:
                    w.writerow({"config": r["config"],
                                "page_cache_share": r["page_cache_share"],
                                "expert_s": r["expert_s"], **layer})
        staged["time.json"] = os.path.join(outdir, "time.json" + tag)
        with open(staged["time.json"], "w", encoding="utf-8") as f:
            json.dump({"trace": info, "model": machine.to_dict(),
                       "notes": lookahead_notes(rows, info["tokens"]),
                       "results": rows}, f, indent=1)
        if title is not None:
            staged["time.png"] = os.path.join(outdir, "time.png" + tag)
            plot_time(rows, staged["time.png"], title)
        install_set(outdir, staged, RESULT_FILES, option="OUTDIR",
                    is_ours=time_set_ours, what=TIME_WHAT)
    finally:
        for tmp in staged.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return [n for n in RESULT_FILES if n in staged]
