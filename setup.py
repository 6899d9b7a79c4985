"""setuptools hook for cffi: compiles engine/csrc into engine._xc."""

from setuptools import setup

setup(cffi_modules=["engine/_build.py:ffibuilder"])
