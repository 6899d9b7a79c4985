"""The build's rules: one import name, packages and data found, the C built.

Every top-level folder of the design (``engine/``, ``oracle/``, ...) installs
as a subpackage of ``xcache`` (``xcache.engine``, ``xcache.oracle``, ...):
the folders stay where the design lays them out and the build maps them.
Packages are found, never listed: every folder under a top-level folder that
holds Python or data is a package of the distribution, and every data file of
the kinds in ``DATA`` beside them ships with it (the C sources the engine is
built from, the scenarios, presets, traces and descriptions the tools read).
cffi compiles ``engine/csrc`` into ``xcache.engine._xc``.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent
#: The design's top-level folders, each installed as ``xcache.<name>``.
TOPS = ("engine", "oracle", "fixtures", "gate", "lab", "faults", "hunt",
        "examples")
#: Data a package's folder ships besides its Python modules.
DATA = ["*.c", "*.h", "*.json", "*.jsonl", "*.toml", "*.md", "*.oracleGeneral"]
#: Never packages: caches and build output left in a working tree.
SKIP = ["*__pycache__*", "*.egg-info*", "*build*", "*.hypothesis*"]


def layout() -> tuple[list[str], dict[str, str]]:
    """The distribution's packages and the folder each one comes from."""
    packages = ["xcache"]
    package_dir = {"xcache": "xcache"}
    for top in TOPS:
        package_dir[f"xcache.{top}"] = top
        packages.append(f"xcache.{top}")
        found = find_namespace_packages(str(HERE / top), exclude=SKIP)
        packages += [f"xcache.{top}.{name}" for name in sorted(found)]
    return packages, package_dir


packages, package_dir = layout()
setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": DATA},
    exclude_package_data={"": ["_xc.c"]},
    cffi_modules=["engine/_build.py:ffibuilder",
                  "engine/_build.py:ffibuilder_test"],
)
