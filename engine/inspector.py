"""Validate a safetensors container, print a summary line and its expert layout.

    xcache-inspect <file.safetensors | folder | index.json> [--layout FILE]

Prints ``OK <path>: <n> tensors, <s> shard(s), <d> bytes of tensor data in
<f> bytes of shard files, dtypes ...`` (tensor data alone, then the shard
files' sizes, headers and padding included)
and, when anything describes experts (``--layout FILE``, an
``xcache-layout.toml`` or ``config.json`` beside the container, a fixture
spec in its metadata, or a tensor name that mentions experts), the expert
layout ``engine.layout.resolve`` finds, one ``key: value`` line each:
``layout`` (its source), ``MoE layers`` (compact ranges), ``experts per
layer``, ``top-k``, ``tensors per expert``, ``bytes per expert``, ``stored``
(contiguous, or scattered with a count), ``fused`` (docs/LAYOUT.md), a
``shared experts`` line for each pattern of a layer's shared experts (how
many per layer and why, the names' pattern, its layers and tensors: never
counted among the routed ``experts per layer``), and
for a from-header twin with stand-in tensors a ``stand-ins`` line naming
them (their shapes are declared stand-ins, not the checkpoint's).  Exits
0.  An invalid container prints ``FAIL <kind> <file> byte <offset>:
<message>`` and exits 1 (a checkpoint's index and config without shard
data get a ``hint:`` line naming ``xcache-fixtures from-header`` before it,
``xcache.weightless``); a
layout that cannot be found or does not fit prints (after the OK line)
``FAIL layout: <message>`` and exits 1, the lines of a layout file that
would settle it (``xcache.layout_rules``) before it.  The verdict is
always the last line.  A path
that names nothing, or that cannot be passed to the C reader, is a mistaken
command: one line on stderr naming it, exit 2.  The C reader does every
container check (docs/DESIGN.md §3); this only reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from xcache.engine._lib import BuildError
from xcache.engine.container import Container
from xcache.engine.detect import read_config
from xcache.engine.errors import EngineError, LayoutError, MisuseError, NotFoundError
from xcache.engine.layout import INDEX_NAME, SPEC_KEY, has_layout, ranges, resolve
from xcache.engine.layout import summarize as summarize_layout
from xcache.engine.layout_core import folder_of
from xcache.engine.regular import read_regular
from xcache.engine.weightless import weightless_hint
from xcache.layout_rules import shared_experts
from xcache.prog import INSPECT, package_version, prog_name


def summarize(path: str, *, direct: bool = False) -> str:
    """Open ``path`` and return its one-line summary (raises EngineError)."""
    with Container(path, direct=direct) as c:
        return _summary_line(path, c, direct)


def _summary_line(path: str, c: Container, direct: bool) -> str:
    infos = c.tensors()
    total = sum(t.nbytes for t in infos)
    dtypes = Counter(t.dtype for t in infos)
    dt = " ".join(f"{k}x{v}" for k, v in sorted(dtypes.items())) or "none"
    # tensor data alone; from-header's "twin size" and the files on disk also
    # hold each shard's header and alignment padding (and the index, config)
    files = sum(Path(p).stat().st_size for p in c.shards)
    line = (f"OK {path}: {len(infos)} tensors, {len(c.shards)} shard(s), "
            f"{total} bytes of tensor data in {files} bytes of shard files, "
            f"dtypes {dt}")
    if direct:
        line += f"; {c.direct_note}"
    return line


def layout_lines(path: str, c: Container, layout: str | None = None
                 ) -> list[str]:
    """The layout report of open container ``c`` (raises LayoutError).

    Empty when ``layout`` is None and nothing describes experts
    (``engine.layout.has_layout``).
    """
    if layout is None and not has_layout(path, c):
        return []
    lay = resolve(path, layout, container=c)
    s = summarize_layout(lay, c)
    n = len(lay.layers)
    stored = ("contiguous (every expert one run)" if not s.scattered else
              f"scattered ({s.scattered} of {s.n_keys} experts in several "
              f"runs)")
    return [f"layout: {lay.source}",
            f"template: {lay.expert_template}",
            f"MoE layers: {ranges(lay.layers)} ({n} layer{'s' * (n != 1)})",
            f"experts per layer: {lay.n_experts}",
            f"top-k: {lay.top_k}",
            f"tensors per expert: {len(lay.tensors)}: "
            + ", ".join(lay.tensors),
            f"bytes per expert: {s.expert_bytes}",
            f"stored: {stored}",
            f"fused: {'yes' if lay.fused else 'no'}",
            *shared_lines(path, c)]


def shared_lines(path: str, c: Container) -> list[str]:
    """One line per pattern of shared experts the names hold (never routed).

    How many a layer has comes from ``config.json`` beside the container
    (``n_shared_experts`` and its aliases), else from numbered names, else
    one module (``layout_rules.shared_experts``).
    """
    try:
        config = read_config(folder_of(Path(path)))
    except LayoutError:  # the layout came from elsewhere; a count is not needed
        config = None
    out = []
    for s in shared_experts(config, (t.name for t in c.tensors())):
        n = len(s.layers)
        out.append(f"shared experts: {s.per_layer} per layer ({s.count_from}), "
                   f"not routed: {s.template} in layers {ranges(s.layers)} "
                   f"({n} layer{'s' * (n != 1)}); tensors {len(s.tensors)}: "
                   + ", ".join(s.tensors))
    return out


def stand_in_line(path: str, c: Container) -> str | None:
    """The line naming a fixture twin's stand-in tensors, or None if it has none.

    A twin made from an index and config.json alone records, as ``stand_ins``
    in its stored spec (``xcache.spec``, index metadata first, else the
    first shard's), the non-expert tensors whose shape no config rule gave:
    their dtype and shape are declared stand-ins, not the checkpoint's.
    """
    p = Path(path)
    idx = p / INDEX_NAME if p.is_dir() else (p if p.name.endswith(".json") else None)
    text = None
    if idx is not None and idx.is_file():
        try:
            meta = json.loads(read_regular(idx)).get("metadata")
        except (OSError, ValueError, AttributeError, RecursionError):
            meta = None
        if isinstance(meta, dict):
            text = meta.get(SPEC_KEY)
    if not isinstance(text, str):
        text = c.metadata.get(SPEC_KEY)
    try:
        names = json.loads(text).get("stand_ins") if isinstance(text, str) else None
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(names, list) or not names:
        return None
    return (f"stand-ins: {len(names)} tensor{'s' * (len(names) != 1)} with a "
            "declared stand-in shape (no config.json rule gave theirs): "
            + ", ".join(map(str, names)))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    ap = argparse.ArgumentParser(prog=prog_name(INSPECT),
                                 description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a .safetensors file, a folder, or an index")
    ap.add_argument("--direct", action="store_true",
                    help="probe O_DIRECT and report whether it is in effect")
    ap.add_argument("--layout", metavar="FILE",
                    help="use this TOML layout file instead of finding one")
    ap.add_argument("--version", action="version",
                    version=f"%(prog)s (xcache) {package_version()}",
                    help="print the xcache version and exit")
    ns = ap.parse_args(argv)
    try:
        with Container(ns.path, direct=ns.direct) as c:
            print(_summary_line(ns.path, c, ns.direct))
            try:
                for line in layout_lines(ns.path, c, ns.layout):
                    print(line)
                if (line := stand_in_line(ns.path, c)) is not None:
                    print(line)
            except LayoutError as e:
                # the verdict is the last line: a layout file's lines that
                # settle it (xcache.layout_rules) come before it
                line, _, then = str(e).partition("\n")
                if then:
                    print(then)
                print(f"FAIL layout: {line}")
                return 1
    except (NotFoundError, MisuseError) as e:
        print(f"{ap.prog}: {ns.path!r}: {e}", file=sys.stderr)
        return 2
    except BuildError as e:
        print(f"{ap.prog}: {e}", file=sys.stderr)
        return 2
    except EngineError as e:
        where = "" if e.offset is None else f" byte {e.offset}"
        hint = weightless_hint(ns.path)
        if hint:  # what to do, before the verdict (the last line)
            print(f"hint: {hint}")
        print(f"FAIL {e.kind}{where}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
