"""``python -m xcache.hunt.fuzz build|run|seed|tools``: the fuzzers.

``tools --seconds S`` is the tool fuzzer (``hunt/fuzz/tools.py``: every
file and argument a user hands the tools, hypothesis-driven, no clang
needed); exit 0 no new finding, 1 a finding not in ``tools.KNOWN``.  The
rest of this text is the coverage-guided header fuzzer.

``build`` compiles the engine with clang, ``-fsanitize=address,fuzzer-no-link``
(libFuzzer's coverage hooks, ASan) into ``--out`` (default
``build/fuzz/``); ``run --seconds S`` builds if needed and fuzzes
``hunt/fuzz/header_target.py`` for S seconds, starting from the corpus in
``hunt/fuzz/corpus/``.  New inputs go to ``--work`` (default
``build/fuzz/new/``), never into the repository's corpus; ``--merge`` then
adds to the corpus only the ones that reach new coverage.  Findings are
saved as ``build/fuzz/crash-*``.  Needs clang and atheris
(``pip install atheris``, in the ``dev`` extra).  ``seed`` rewrites the
corpus' seed inputs (``seed-*``: every preset's headers, a valid index).
Exit status: libFuzzer's
(0 no finding, non-zero a finding), 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
TARGET = Path(__file__).resolve().parent / "header_target.py"
SANITIZE = "address,fuzzer-no-link"


def build(out: Path) -> Path:
    """Compile the instrumented engine into ``out``; return the .so path."""
    if shutil.which("clang") is None:
        raise SystemExit("fuzz: clang is needed (Debian: apt-get install -y clang)")
    env = dict(
        os.environ, CC="clang", LDSHARED="clang -shared -pthread", XC_SANITIZE=SANITIZE
    )
    res = subprocess.run(
        [sys.executable, "-m", "xcache.engine._build", "--out", str(out),
         "--src", str(ROOT / "engine")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        sys.stderr.write(res.stdout + res.stderr)
        raise SystemExit("fuzz: the instrumented build failed")
    return Path(res.stdout.strip().splitlines()[-1])


def runtime() -> str:
    """atheris' ASan + libFuzzer runtime, to preload into the interpreter."""
    try:
        import atheris
    except ImportError:
        raise SystemExit("fuzz: atheris is needed (pip install atheris)") from None
    return str(Path(atheris.path()) / "asan_with_fuzzer.so")


def run(ns: argparse.Namespace) -> int:
    """Build, then fuzz for ns.seconds; return libFuzzer's exit status."""
    out = Path(ns.out).resolve()
    so = build(out)
    work = Path(ns.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        XC_ENGINE_LIB=str(so),
        LD_PRELOAD=runtime(),
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:"
        "alloc_dealloc_mismatch=0:allocator_may_return_null=1",
        PYTHONPATH=str(ROOT),
    )
    cmd = [
        sys.executable,
        str(TARGET),
        str(work),
        str(CORPUS),
        f"-max_total_time={ns.seconds}",
        f"-artifact_prefix={out}/",
        f"-max_len={ns.max_len}",
        "-timeout=10",
        "-rss_limit_mb=4096",
        f"-jobs={ns.jobs}",
        f"-workers={ns.jobs}",
    ] + ns.libfuzzer
    if ns.jobs <= 1:
        cmd = [c for c in cmd if not c.startswith(("-jobs", "-workers"))]
    rc = subprocess.run(cmd, env=env, cwd=ROOT).returncode
    if rc == 0 and ns.merge:
        rc = subprocess.run(
            [
                sys.executable,
                str(TARGET),
                "-merge=1",
                f"-max_len={ns.max_len}",
                str(CORPUS),
                str(work),
            ],
            env=env,
            cwd=ROOT,
        ).returncode
    return rc


def seed(corpus: Path) -> list[Path]:
    """Write the seeds into ``corpus``: every preset's shard headers, a valid index."""
    from xcache.fixtures.layout import plan
    from xcache.fixtures.presets import PRESETS, preset
    from xcache.hunt.fuzz import inputs

    corpus.mkdir(parents=True, exist_ok=True)
    written = []
    for name in PRESETS:
        files = plan(preset(name)).files
        if name == "huge-sparse":  # 2.9 MB of headers: its smallest one
            files = [min(files, key=lambda f: len(f.header))]
        for f in files:
            p = corpus / f"seed-{name}-{f.name.split('.')[0]}"
            p.write_bytes(bytes([inputs.MODE_HEADER]) + f.header)
            written.append(p)
    p = corpus / "seed-index"
    p.write_bytes(bytes([inputs.MODE_INDEX]) + inputs.valid_index())
    written.append(p)
    return written


def tools_main(ns: argparse.Namespace) -> int:
    """``tools``: replay the corpus, fuzz for ns.seconds; 1 on a new finding."""
    if ns.write_seeds:
        from xcache.hunt.fuzz.tool_seeds import write_seeds

        for p in write_seeds():
            print(p.relative_to(ROOT))
        return 0
    from xcache.hunt.fuzz import tools

    if ns.target:
        bad = [t for t in ns.target if t not in tools.STRATEGIES]
        if bad:
            print(f"fuzz tools: --target {bad[0]!r}: not a target (targets: "
                  f"{', '.join(tools.STRATEGIES)})", file=sys.stderr)
            return 2
    print(f"fuzz tools: corpus {len(tools.corpus_cases())} case(s), then "
          f"{ns.seconds:g} s of new cases; each case under "
          f"{tools.ADDRESS_BYTES >> 30} GiB of address space, "
          f"{tools.CPU_SECONDS} s CPU, {tools.WALL_SECONDS:g} s wall", flush=True)
    report = tools.run(ns.seconds, ns.target, keep=Path(ns.keep),
                       log=lambda s: print(s, flush=True), seed=ns.seed,
                       rounds=ns.rounds)
    print(f"fuzz tools: {report.runs} case(s), {report.rounds} round(s) of new "
          "ones: " + ", ".join(
        f"{k} {v}" for k, v in sorted(report.by_target.items())))
    print(f"fuzz tools: {len(report.new)} new finding(s), {len(report.known)} "
          f"known ({len(tools.KNOWN)} listed); cases saved in {ns.keep}")
    return 1 if report.new else 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(
        prog="python -m xcache.hunt.fuzz",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile the instrumented engine")
    sub.add_parser("seed", help="write the seed inputs into hunt/fuzz/corpus")
    r = sub.add_parser("run", help="build, then fuzz the header reader")
    for p in (b, r):
        p.add_argument(
            "--out",
            default=str(ROOT / "build" / "fuzz"),
            help="build and findings folder (default build/fuzz)",
        )
    r.add_argument("--seconds", type=int, default=300, help="how long (default 300)")
    r.add_argument(
        "--work",
        default=str(ROOT / "build" / "fuzz" / "new"),
        help="where new inputs go (default build/fuzz/new)",
    )
    r.add_argument(
        "--max-len",
        type=int,
        default=65536,
        help="largest input tried, bytes (default 65536)",
    )
    r.add_argument("--jobs", type=int, default=1, help="parallel fuzzers (default 1)")
    r.add_argument(
        "--merge",
        action="store_true",
        help="afterwards, add inputs with new coverage to the corpus",
    )
    r.add_argument("libfuzzer", nargs="*", help="more libFuzzer flags (after --)")
    t = sub.add_parser("tools", help="fuzz every file and argument of the tools "
                       "(hunt/fuzz/tools.py)")
    t.add_argument("--seconds", type=float, default=60,
                   help="how long to draw new cases, after the corpus (default 60)")
    t.add_argument("--target", action="append", default=None,
                   help="only this target (repeatable): " + ", ".join(
                       ("inspect", "inspect-layout", "gate-container", "gate-spec",
                        "new", "verify", "from-header", "identify", "lab",
                        "predict", "gate-scenario", "gate-programs")))
    t.add_argument("--seed", type=int, default=None,
                   help="draw round i with seed SEED+i: the same cases on every "
                        "machine (default: a fresh random draw)")
    t.add_argument("--rounds", type=int, default=None,
                   help="at most this many rounds of 5 new cases (with --seed, "
                        "a fixed set of cases whatever the machine's speed)")
    t.add_argument("--keep", default=str(ROOT / "build" / "fuzz-tools"),
                   help="where each finding's case is saved (default "
                   "build/fuzz-tools)")
    t.add_argument("--write-seeds", action="store_true",
                   help="rewrite hunt/fuzz/corpus-tools/seed and exit")
    ns = ap.parse_args(argv)
    if ns.cmd == "tools":
        return tools_main(ns)
    if ns.cmd == "seed":
        for p in seed(CORPUS):
            print(p.relative_to(ROOT))
        return 0
    if ns.cmd == "build":
        print(build(Path(ns.out).resolve()))
        return 0
    return run(ns)


if __name__ == "__main__":
    sys.exit(main())
