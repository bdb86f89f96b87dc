"""Builds the compiled parts: the ``native`` matching engine and the batch answer's JSON
encoder; everything else is in pyproject.toml."""

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

ANSWERS = Extension(
    "loader._answers",
    sources=["loader/_answers.pyx"],
    depends=["loader/answers_json.hpp"],
    include_dirs=["loader"],
    language="c++",
    extra_compile_args=["-O3", "-std=c++17"],
)

setup(ext_modules=cythonize([NATIVE, ANSWERS], language_level=3))
