#!/usr/bin/env bash
# Coverage: Python branch coverage (oracle, fixtures, faults, hunt, engine) and C
# line + branch coverage of engine/csrc, from one run of the whole suite
# against a gcov-instrumented engine.  Standalone: run it from the repository
# root with the project's venv activated (pip install -e '.[test]').
#   .ci/coverage.sh            # prints both summaries
#   XC_COVERAGE_DIR=d .ci/...  # keep the build, .gcda files and reports in d
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

out=${XC_COVERAGE_DIR:-$(mktemp -d)}
[ -n "${XC_COVERAGE_DIR:-}" ] || trap 'rm -rf "$out"' EXIT
mkdir -p "$out"

echo "== build (XC_COVERAGE=1: --coverage -O0) into $out"
so=$(XC_COVERAGE=1 python -m xcache.engine._build --out "$out/build")
find "$out/build" -name '*.gcda' -delete

echo "== tests under coverage (pytest-cov; every core through pytest-xdist)"
export XC_ENGINE_LIB="$so"
export COVERAGE_FILE="$out/.coverage"
# the gate's engine runs stay in the test's process (gate/contained.py): a
# forked child ends with os._exit, which writes neither gcov's counts nor
# coverage.py's; tests/replay/test_contained.py forks on its own
export XC_GATE_IN_PROCESS=1
set +e
# pytest-cov starts coverage in each xdist worker and combines their data
# into $COVERAGE_FILE; libgcov merges the workers' .gcda counts under a lock.
# XC_COVERAGE_ALL=1 runs every test; by default the `nosan` ones are left
# out: they mostly run the tools as subprocesses (the gate builds its own,
# uninstrumented engine), which neither coverage sees, and CI has already
# run them in the README test stage.
sel=(-m "not nosan")
[ "${XC_COVERAGE_ALL:-0}" = 1 ] && sel=()
python -m pytest -q -n auto -p no:cacheprovider --cov --cov-report= "${sel[@]}" tests/
rc=$?
set -e
unset XC_ENGINE_LIB XC_GATE_IN_PROCESS

echo "== Python branch coverage"
python -m coverage report --skip-empty

echo "== C line and branch coverage (engine/csrc)"
# cffi compiles each source under the build folder at its absolute path,
# so the .gcno/.gcda pairs sit in $out/build$root/engine/csrc.
# xc_testhooks.c and xc_testhooks_check.c are test instrumentation (they
# corrupt a cache on purpose so that check() can be verified), not engine
# code: excluded from the figure.
gcovr --root "$root" --object-directory "$out/build" \
      --filter "$root/engine/csrc/" --exclude "$root/engine/csrc/xc_testhooks.c" \
      --exclude "$root/engine/csrc/xc_testhooks_check.c" \
      --txt-metric line --txt-metric branch \
      "$out/build"
exit "$rc"
