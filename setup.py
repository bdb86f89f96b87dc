"""Builds the compiled ``native`` matching engine; everything else is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = Extension(
    "matcher._native",
    sources=["matcher/_native.pyx"],
    depends=["matcher/native_core.hpp"],
    include_dirs=["matcher"],
    language="c++",
    extra_compile_args=["-O3", "-std=c++17"],
)

setup(ext_modules=cythonize([NATIVE], language_level=3))
