"""Builds the kernel extensions (metadata lives in pyproject.toml), one per user: mqcore._store
(store kernels), mqcore._pipeline (the broker's request pipeline), mqcore._wire_client (the
client's wire kernels) and mqcore._columns (columnar decode, used by Spark)."""
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension(
        "mqcore._store",
        ["mqcore/_store.pyx"],
        include_dirs=["mqcore", numpy.get_include()],
        libraries=["z"],  # zlib's crc32 for BODYCRC
        extra_compile_args=["-O3"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    Extension(
        "mqcore._pipeline",
        ["mqcore/_pipeline.pyx"],
        include_dirs=["mqcore"],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "mqcore._columns",
        ["mqcore/_columns.pyx"],
        include_dirs=["mqcore", numpy.get_include()],
        libraries=["z"],  # zlib's crc32 for the optional BODYCRC check
        extra_compile_args=["-O3"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    Extension(
        "mqcore._wire_client",
        ["mqcore/_wire_client.pyx"],
        extra_compile_args=["-O3"],
    ),
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
