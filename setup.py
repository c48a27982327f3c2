"""Builds the extensions (metadata lives in pyproject.toml): mqcore._store, the store's kernels,
and mqcore._wire_client, the client's wire kernels (a separate module: nothing shared, and a
client change does not rebuild the store)."""
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
        "mqcore._wire_client",
        ["mqcore/_wire_client.pyx"],
        extra_compile_args=["-O3"],
    ),
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
