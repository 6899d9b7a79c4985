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


def write_time_results(outdir: str, info: dict[str, Any], machine: Any,
                       rows: list[dict[str, Any]], title: str | None) -> list[str]:
    """Write time.csv, time_layers.csv, time.json and (``title``) time.png as a set."""
    from xcache.fixtures.ownership import install_set  # noqa: PLC0415
    from xcache.lab.timing.cli import lookahead_notes  # noqa: PLC0415
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
