"""The gate on a whole-index twin (DeepSeek-V3's by default), beside the default gate.

    python bench/huge_twin.py [--work DIR] [--model NAME]

Writes the folder a user without the weights holds (index + config from
``fixtures/models/NAME.json``; DeepSeek-V3's: 62 layers, 256 experts, 163
shards filled by size), twins it with ``xcache-fixtures from-header SRC
OUT --scale auto``, then times ``replay.py WORK`` (the default gate) and
``replay.py --container TWIN WORK`` back to back and prints both, their
ratio and the load average, the figure docs/BENCHMARKS.md records.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(args: list[str]) -> tuple[float, str]:
    """Seconds a replay.py run took, and its last output line (PASS or FAIL ...)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(ROOT / "replay.py"), *args],
                       capture_output=True, text=True, cwd=ROOT, check=False)
    took = time.perf_counter() - t0
    last = (r.stdout.strip().splitlines() or [r.stderr.strip()])[-1]
    return took, last


def main(argv: list[str] | None = None) -> int:
    """Build the twin, time both gates, print the figures; 1 if either failed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=None,
                    help="a new folder to work in (default: a temporary one)")
    ap.add_argument("--model", default="deepseek-v3",
                    help="a description in fixtures/models/ (default: deepseek-v3)")
    a = ap.parse_args(argv)
    from xcache.fixtures import realistic  # noqa: PLC0415

    work = a.work or Path(tempfile.mkdtemp(prefix="huge-twin-"))
    src, twin = work / "src", work / "twin"
    if not twin.exists():
        realistic.expand(ROOT / "fixtures" / "models" / f"{a.model}.json", src,
                         form="index")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "xcache.fixtures", "from-header",
                        str(src), str(twin), "--scale", "auto"], check=True,
                       capture_output=True, cwd=ROOT)
        print(f"twin written in {time.perf_counter() - t0:.1f} s: "
              f"{len(list(twin.glob('*.safetensors')))} shards")
    load = os.getloadavg()
    base, base_last = _timed([str(work / "g0")])
    huge, huge_last = _timed(["--container", str(twin), str(work / "g1")])
    print(f"default gate: {base:.1f} s ({base_last[:60]})")
    print(f"huge twin gate: {huge:.1f} s ({huge_last[:60]})")
    print(f"ratio huge/default: {huge / base:.1f}x; load before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, cores {os.cpu_count()}")
    return 0 if base_last.startswith("PASS") and huge_last.startswith("PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
