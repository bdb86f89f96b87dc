"""Builds the compiled parts: the ``native`` matching engine and the batch answer's JSON
encoder; everything else is in pyproject.toml."""

from glob import glob

from Cython.Build import cythonize
from setuptools import Extension, setup


def cpp_extension(name: str, package: str, *headers: str) -> Extension:
    """``package.name`` from ``package/name.pyx`` over the headers ``package/<header>`` (globs;
    C++17, -O3)."""
    return Extension(
        f"{package}.{name}",
        sources=[f"{package}/{name}.pyx"],
        depends=sorted(path for header in headers for path in glob(f"{package}/{header}")),
        include_dirs=[package],
        language="c++",
        extra_compile_args=["-O3", "-std=c++17"],
    )


EXTENSIONS = [
    cpp_extension("_native", "matcher", "native/*.hpp"),
    cpp_extension("_answers", "app", "*.hpp"),
]

# The two modules compile at once, not one after the other (a setup's longest step).
setup(
    ext_modules=cythonize(EXTENSIONS, language_level=3),
    options={"build_ext": {"parallel": 2}},
)
