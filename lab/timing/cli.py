"""The time lab's command line: ``python replay.py time TRACE OUTDIR [options]``.

Also ``python replay.py time --calibrate MODEL`` (no trace): measure this
machine's disk and cache overheads and write the model file the lab reads
(:mod:`lab.timing.calibrate`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from contextlib import ExitStack
from typing import Any

from xcache import data
from xcache.lab.runtimes import about, epilog
from xcache.lab.timing.results import (
    RESULT_FILES,
    TIME_WHAT,
    lookahead_notes,
    time_set_ours,
    write_time_results,
)
from xcache.prog import REPLAY, prog_name

#: One line on what the time lab does, for the front door's list of commands.
SUMMARY = ("predict ms per token of streaming decode for every cache, "
           "schedule and prefetch; write time.csv, time.json and time.png "
           "(and time_layers.csv); " + about("time"))
PROG = f"{prog_name(REPLAY)} time"  # xcache.prog
#: The deepest read-ahead queue --depth takes (the model's tables grow with it).
MAX_DEPTH = 4096

def _list(text: str, option: str, kind: Callable[[str], Any],
          check: Callable[[Any], bool], what: str) -> tuple[Any, ...]:
    """A comma-separated option as a tuple; ValueError naming the option."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = kind(part)
        except ValueError:
            raise ValueError(f"{option}: {part!r} is not {what}") from None
        if not check(v):
            raise ValueError(f"{option}: {part} is not {what}")
        out.append(v)
    if not out:
        raise ValueError(f"{option}: no value in {text!r}")
    return tuple(out)


def _time(x: Any) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x >= 0


def _finite(lo: float, hi: float, open_hi: bool = False) -> Callable[[str], float]:
    """argparse ``type=``: a finite number in ``lo..hi`` (``hi`` excluded if open)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(v) and lo <= v and (v < hi if open_hi else v <= hi)):
            raise argparse.ArgumentTypeError(
                f"{text} is not a finite number in [{lo:g}, {hi:g}"
                f"{')' if open_hi else ']'}")
        return v

    parse.__name__ = "number"
    return parse


def parser() -> argparse.ArgumentParser:
    """The time lab's options."""
    from xcache.fixtures.ownership import Output  # noqa: PLC0415
    from xcache.lab.sweep import EXECUTORS  # noqa: PLC0415
    from xcache.lab.timing.model import CALIBRATED, MAX_EXPERT_BYTES, is_calibrated  # noqa: PLC0415
    from xcache.oracle.bounded import MAX_INT, Input, int_option  # noqa: PLC0415
    from xcache.oracle.traces import FORMAT_TITLES, FORMATS  # noqa: PLC0415

    ap = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} TRACE OUTDIR [options]\n"
              f"       {PROG} --calibrate MODEL [--expert-bytes B]",
        description="A discrete-event model of streaming decode: the trace's "
                    "routing, the lab's cache outcomes, a disk model and a "
                    "compute model give seconds per token and where they go, "
                    "for every cache, schedule and lookahead predictor.",
        epilog=epilog("time", "Every time it prints is in ms per token; a "
                      "legend under its table names each column.  Exit "
                      "status: 0 the files were written, 2 the trace, the "
                      "options, the model or the output folder are unusable, "
                      "130 interrupted.  docs/DESIGN.md 'The time lab' "
                      "describes the model."))
    ap.add_argument("trace", metavar="TRACE", nargs="?",
                    type=Input(data.path_arg("trace")),
                    help="trace file, or a shipped trace's name (xcache-data)")
    ap.add_argument("outdir", metavar="OUTDIR", nargs="?",
                    type=Output("folder", whole=False, files=RESULT_FILES,
                                is_ours=time_set_ours, what=TIME_WHAT),
                    help="folder for time.csv, time_layers.csv, time.json and "
                         "time.png")
    ap.add_argument("--calibrate", default=None, metavar="MODEL",
                    type=Output(is_ours=is_calibrated, what=CALIBRATED),
                    help="measure this machine (a file of experts in TMPDIR, "
                         "cold with O_DIRECT and warm, queue depths 1-8) and "
                         "write the model file MODEL; no trace")
    ap.add_argument("--format", choices=(*FORMATS, "auto"), default=None,
                    help="trace format: " + "; ".join(
                        f"{k}: {v}" for k, v in FORMAT_TITLES.items())
                    + "; auto: detect it (default: from the extension)")
    ap.add_argument("--top-k", type=int_option(1, MAX_INT), default=None, metavar="K",
                    help="experts per routed call (int32 traces, pair dumps)")
    ap.add_argument("--layers", type=int_option(1, MAX_INT), default=None, metavar="N",
                    help="MoE layers (int32 traces)")
    ap.add_argument("--experts", type=int_option(1, MAX_INT), default=None,
                    metavar="N",
                    help="experts per layer")
    ap.add_argument("--tokens", type=int_option(1, MAX_INT), default=None, metavar="N",
                    help="time only the first N tokens (default: all)")
    ap.add_argument("--model", default=None, metavar="FILE", type=Input(),
                    help="the disk and compute model (JSON or TOML; default: "
                         "the shipped nominal NVMe drive, "
                         "lab/timing/models/nvme.json)")
    ap.add_argument("--policies", default="lru", metavar="LIST",
                    help="cache policy specs (default: %(default)s)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--slots", default=None, metavar="LIST",
                      help="cache sizes in slots")
    size.add_argument("--fractions", default=None, metavar="LIST",
                      help="cache sizes as fractions of the timed working set "
                           "(default 0.25,0.5)")
    ap.add_argument("--threads", default="0,1,2", metavar="LIST",
                    help="read-ahead threads; 0 is the synchronous schedule "
                         "(default: %(default)s)")
    ap.add_argument("--depth", default="64", metavar="LIST",
                    help="read-ahead queue depths (io_depth; default: %(default)s)")
    ap.add_argument("--split", default="1,3", metavar="LIST",
                    help="split-path thresholds (split_min_misses) with "
                         "read-ahead (default: %(default)s)")
    ap.add_argument("--predictors", default="none,previous,oracle",
                    metavar="LIST",
                    help="lookahead prefetch: none, or predictors of `replay.py "
                         "predict` (previous, popularity, ewma[:alpha=F], pair, "
                         "oracle) (default: %(default)s)")
    ap.add_argument("--budget", type=int_option(1, 1 << 20), default=None, metavar="S",
                    help="speculative reads per step (default: top-k)")
    ap.add_argument("--train-fraction", type=_finite(0.0, 1.0, open_hi=True),
                    default=0.0, metavar="F",
                    help="fit the predictors on the first F of the tokens and "
                         "time the rest (default 0: time every token; "
                         "popularity and pair then predict nothing)")
    ap.add_argument("--expert-bytes", type=int_option(1, MAX_EXPERT_BYTES),
                    default=None, metavar="B",
                    help="bytes per expert (default: the model file's)")
    ap.add_argument("--expert-s", default=None, metavar="LIST",
                    help="compute seconds per expert (default: the model file's)")
    ap.add_argument("--layer-s", type=_finite(0.0, 3600.0), default=None, metavar="S",
                    help="non-expert seconds per step (default: the model file's)")
    ap.add_argument("--access-s", type=_finite(0.0, 3600.0), default=None,
                    metavar="S",
                    help="cache overhead seconds per expert handed over "
                         "(default: the model file's)")
    ap.add_argument("--page-cache-share", default=None, metavar="LIST",
                    help="shares of reads the page cache serves (default: the "
                         "model file's)")
    ap.add_argument("--executor", choices=EXECUTORS, default=None,
                    help="where the cells run (default: process; dask with "
                         "--scheduler)")
    ap.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="submit the cells to the running dask scheduler there")
    ap.add_argument("--workers", type=int_option(1, 1024),
                    default=min(2, os.cpu_count() or 1),
                    metavar="N", help="workers of the executor (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    from xcache.lab.cli import version_text  # noqa: PLC0415

    ap.add_argument("--version", action="version", version=version_text(),
                    help="print the xcache version and exit")
    return ap


def _grid(ns: argparse.Namespace, top_k: int, sizes: Sequence[int]) -> Any:
    """The sweep's :class:`~lab.timing.sweep.Grid` from the options."""
    from xcache.lab.timing.sweep import Grid  # noqa: PLC0415

    def whole(lo: int) -> Callable[[Any], bool]:
        return lambda v: v >= lo

    preds = tuple("" if p == "none" else p for p in
                  _list(ns.predictors, "--predictors", str, bool, "a predictor"))
    return Grid(
        policies=_list(ns.policies, "--policies", str, bool, "a policy"),
        slots=tuple(sizes),
        threads=_list(ns.threads, "--threads", int, lambda v: 0 <= v <= 64,
                      "a thread count in 0..64"),
        depths=_list(ns.depth, "--depth", int, lambda v: 1 <= v <= MAX_DEPTH,
                     f"a depth in 1..{MAX_DEPTH}"),
        splits=_list(ns.split, "--split", int, whole(1), "a threshold >= 1"),
        predictors=preds, budget=ns.budget or top_k,
        expert_s=(_list(ns.expert_s, "--expert-s", float, _time, "a time >= 0")
                  if ns.expert_s else (None,)),
        page_cache_share=(_list(ns.page_cache_share, "--page-cache-share", float,
                                lambda v: 0 <= v <= 1, "a share in [0, 1]")
                          if ns.page_cache_share else (None,)))


def _sizes(ns: argparse.Namespace, test: Sequence[Any], top_k: int) -> list[int]:
    """Cache sizes from --slots, or --fractions of the timed steps' distinct keys.

    Each is raised to top-k + 1, the least the live cache opens with.
    """
    if ns.slots is not None:
        sizes = _list(ns.slots, "--slots", int, lambda v: v >= 1, "a size >= 1")
    else:
        ws = len({(st.layer, e) for st in test for e in st.experts})
        fr = _list(ns.fractions or "0.25,0.5", "--fractions", float,
                   lambda v: 0 < v <= 1, "a fraction in (0, 1]")
        sizes = tuple(max(1, round(f * ws)) for f in fr)
    return sorted({max(n, top_k + 1) for n in sizes})


def _check_predictors(grid: Any, n_layers: int, n_experts: int, top_k: int) -> None:
    """Refuse an unknown predictor or policy before the sweep (ValueError)."""
    from xcache.lab.cli import check_policies  # noqa: PLC0415
    from xcache.lab.predict.predictors import make_predictor  # noqa: PLC0415

    for p in grid.predictors:
        if p:
            try:
                make_predictor(p, n_layers, n_experts, top_k)
            except ValueError as e:
                raise ValueError(f"--predictors: {e}") from None
    check_policies(list(grid.policies))
    if grid.predictors and all(p for p in grid.predictors) \
            and set(grid.threads) == {0}:
        raise ValueError("--predictors: a lookahead needs read-ahead threads; "
                         "--threads has only 0")


#: what ``--calibrate`` uses; any other argument given with it is refused
CALIBRATION_ARGS = frozenset({"calibrate", "expert_bytes", "expert_s", "layer_s",
                              "quiet", "help"})


def calibration_ignores(ap: argparse.ArgumentParser,
                        ns: argparse.Namespace) -> list[str]:
    """The arguments given beside ``--calibrate`` that it would not use, as
    the user wrote them (every option of the parser, a new one included)."""
    return [a.option_strings[0] if a.option_strings else a.metavar or a.dest
            for a in ap._actions
            if a.dest not in CALIBRATION_ARGS
            and getattr(ns, a.dest, a.default) != a.default]


def calibration_room(path: str, nbytes: int, size: int, prog: str,
                     quiet: bool) -> bool:
    """Whether ``--calibrate`` may start: MODEL's folder writable (nothing written
    to find out) and its ``nbytes`` of scratch files said, within the limit."""
    import tempfile  # noqa: PLC0415

    from xcache.fixtures.ownership import check_room  # noqa: PLC0415
    from xcache.fixtures.writer import MAX_WRITE_ENV, write_limit  # noqa: PLC0415

    parent = os.path.dirname(os.path.abspath(path))
    if not (os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK)):
        print(f"{prog}: --calibrate {path}: cannot write it in {parent}",
              file=sys.stderr)
        return False
    folder = os.environ.get("TMPDIR") or tempfile.gettempdir()
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)):
        print(f"{prog}: --calibrate writes its scratch experts in TMPDIR, and "
              f"{folder} is not a folder it can write in", file=sys.stderr)
        return False
    try:
        check_room(nbytes, folder, "calibration scratch files",
                   limit=write_limit(), limit_says="--expert-bytes smaller, "
                   f"or raise ${MAX_WRITE_ENV}", say=None if quiet else print)
    except (OSError, ValueError) as e:
        print(f"{prog}: --expert-bytes {size}: {getattr(e, 'strerror', None) or e}",
              file=sys.stderr)
        return False
    return True


def run(argv: Sequence[str]) -> int:
    """Run the time lab (or --calibrate); 0 done, 2 unusable input, 130 Ctrl-C."""
    from xcache.fixtures.folders import unmake_folders  # noqa: PLC0415
    from xcache.fixtures.ownership import (  # noqa: PLC0415
        SetInstalled,
        check_outputs,
        interrupted,
    )
    from xcache.lab.cli import _stop  # noqa: PLC0415

    ap = parser()
    try:
        ns = ap.parse_args(list(argv))
    except SystemExit as e:
        return 2 if e.code else 0
    try:  # every output, before any work (the one writer)
        check_outputs(ap, ns)
    except OSError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if ns.calibrate is not None:
        from xcache.lab.timing.calibrate import run_calibration  # noqa: PLC0415

        ignored = calibration_ignores(ap, ns)
        if ignored:
            print(f"{PROG}: --calibrate measures this machine and times no "
                  f"trace: {', '.join(ignored)} would be ignored (calibrate "
                  "first, then time the trace with --model MODEL)",
                  file=sys.stderr)
            return 2

        try:
            nominal = (_list(ns.expert_s, "--expert-s", float, _time, "a time >= 0")[0]
                       if ns.expert_s else None)
        except ValueError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
        from xcache.lab.timing.calibrate import scratch_bytes  # noqa: PLC0415

        size = ns.expert_bytes or 131072  # its alignment: run_calibration's
        if size % 4096 == 0 and size >= 8192 and not calibration_room(
                ns.calibrate, scratch_bytes(size), size, PROG, ns.quiet):
            return 2  # the work stated before it starts, refused past a limit
        return run_calibration(ns.calibrate, ns.expert_bytes, PROG, ns.quiet,
                               nominal, ns.layer_s)
    if ns.trace is None or ns.outdir is None:
        print(f"{PROG}: needs TRACE and OUTDIR (or --calibrate MODEL)",
              file=sys.stderr)
        return 2
    made: list[Executor] = []
    dirs: list[str] = []  # the OUTDIR folders the run made
    with ExitStack() as stack:
        try:
            rc = _run(ns, stack, made.append, dirs)
        except KeyboardInterrupt as exc:
            _stop(made[-1] if made else None)
            stack.pop_all()
            if not isinstance(exc, SetInstalled):
                unmake_folders(dirs)
            print(interrupted(PROG, ns.outdir, exc), file=sys.stderr)
            return 130
    if rc:
        unmake_folders(dirs)
    return rc


def _run(ns: argparse.Namespace, stack: ExitStack,
         seen: Callable[[Executor], None], dirs: list[str]) -> int:
    """The run after parsing; ``dirs`` learns the OUTDIR folders made for it."""
    from xcache.lab.cli import _can_plot, _check_options, read_for, writable_folder  # noqa: PLC0415
    from xcache.lab.predict.evaluate import check_shape, steps_of  # noqa: PLC0415
    from xcache.lab.sweep import EXECUTOR_REFUSALS, executor_refusal, make_executor  # noqa: PLC0415
    from xcache.lab.timing.model import ModelError, load_model  # noqa: PLC0415
    from xcache.lab.timing.outcomes import check_keys  # noqa: PLC0415
    from xcache.lab.timing.sweep import run_time_sweep, steps_window  # noqa: PLC0415

    try:
        ns.mode, ns.per_layer = "step", False
        _check_options(ns)
        if ns.tokens is not None and ns.tokens < 1:
            raise ValueError(f"--tokens: {ns.tokens}; at least 1")
        machine = load_model(ns.model).with_(
            expert_bytes=ns.expert_bytes, layer_s=ns.layer_s,
            access_s=ns.access_s)
        trace = read_for(ns, ns.trace, True)
        check_shape(trace.n_layers, trace.n_experts)
        check_keys(trace.n_layers, trace.n_experts)
        steps, _ = steps_of(trace)
        train, test, n_tokens = steps_window(steps, ns.tokens, ns.train_fraction)
        sizes = _sizes(ns, test, trace.top_k)
        grid = _grid(ns, trace.top_k, sizes)
        _check_predictors(grid, trace.n_layers, trace.n_experts, trace.top_k)
        machines = grid.machines(machine)
        dirs += writable_folder(ns.outdir)
    except (OSError, ValueError, ModelError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        executor = make_executor(ns.executor, ns.workers, stack, ns.scheduler)
    except EXECUTOR_REFUSALS as exc:
        print(f"{PROG}: {executor_refusal(ns.executor, exc)}", file=sys.stderr)
        return 2
    seen(executor)
    shared = {"train": train, "test": test, "n_tokens": n_tokens,
              "n_layers": trace.n_layers, "n_experts": trace.n_experts,
              "top_k": trace.top_k, "grid": grid, "machines": machines}
    try:
        rows = run_time_sweep(shared, executor, quiet=ns.quiet)
    except Exception as exc:  # engine errors name the bad policy or size
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    info = {"name": trace.name or os.path.basename(ns.trace), "tokens": n_tokens,
            "steps": len(test), "layers": trace.n_layers,
            "experts": trace.n_experts, "top_k": trace.top_k,
            "train_tokens": len({st.token for st in train})}
    print_table(info, rows)
    draw = _can_plot()
    title = (f"{info['name']}: {n_tokens} tokens, "
             f"{machine.expert_bytes // 1024} KiB experts")
    try:
        write_time_results(ns.outdir, info, machine, rows, title if draw else None)
    except OSError as exc:
        print(f"{PROG}: cannot write the results: {exc}", file=sys.stderr)
        return 2
    if draw:
        print(f"wrote {os.path.join(ns.outdir, 'time.csv')}, time_layers.csv, "
              "time.json and time.png")
    else:
        print(f"{PROG}: wrote time.csv, time_layers.csv and time.json; time.png "
              "needs matplotlib "
              "(pip install -e '.[lab]')", file=sys.stderr)
    return 0


#: The legend printed under the table: every column, and the configuration's parts.
LEGEND = (
    "columns (every time is ms per token; ms/tok = compute + wait):",
    "  misses   demand misses (accesses whose expert was not resident when "
    "the step asked)",
    "  ratio    misses / expert accesses",
    "  spec     speculative reads a lookahead issued (its prefetches)",
    "  ms/tok   predicted ms per token;  tok/s  tokens per second (1000 / ms/tok)",
    "  compute  the consumer's work: experts, non-expert work and cache calls "
    "(a prefetched key costs access_s)",
    "  wait     the consumer idle on a read: exposed I/O",
    "  hidden   I/O in flight while the consumer computed (not added to ms/tok)",
    "  wasted   service time of speculative reads never used (not added)",
    "configuration: POLICY SLOTS, then sync (no readers: the consumer reads "
    "each miss itself) or raN (N read-ahead threads) T=n (a stream takes the "
    "split path from n keys not ready) [D=n queue depth] [+P: lookahead "
    "prefetch by predictor P] [pc=F: page-cache share]",
)


def print_table(info: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """A line per configuration (counters, where the time goes), a legend, notes."""
    print(f"{info['name']}: {info['tokens']} tokens timed ({info['steps']} steps), "
          f"{info['layers']} layers x {info['experts']} experts, top-{info['top_k']}")
    head = (f"{'configuration':34s} {'misses':>7s} {'ratio':>6s} {'spec':>6s} "
            f"{'ms/tok':>8s} {'tok/s':>7s} {'compute':>8s} {'wait':>7s} "
            f"{'hidden':>7s} {'wasted':>7s}")
    print(head)
    for r in rows:
        label = r["config"]
        if len(rows) > 1 and r.get("page_cache_share"):
            label += f" pc={r['page_cache_share']:g}"
        print(f"{label[:34]:34s} {r['misses']:7d} {r['miss_ratio']:6.3f} "
              f"{r['spec_issued']:6d} "
              f"{r['s_per_token'] * 1e3:8.3f} {r['tok_per_s']:7.1f} "
              f"{r['compute_s'] * 1e3:8.3f} {r['wait_s'] * 1e3:7.3f} "
              f"{r['hidden_s'] * 1e3:7.3f} {r['wasted_s'] * 1e3:7.3f}")
    for line in LEGEND:
        print(textwrap.fill(line, 100, break_on_hyphens=False,
                            subsequent_indent=" " * (11 if line[:2] == "  " else 4)))
    for note in lookahead_notes(rows, info["tokens"]):
        print(textwrap.fill(f"note: {note}", 100, subsequent_indent="    "))
