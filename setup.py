"""setuptools shim: cffi_modules is a setup() keyword, so it lives here (see pyproject.toml)."""
from setuptools import setup

setup(cffi_modules=["shm/_ring_build.py:ffibuilder"])
