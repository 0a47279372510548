"""Build step for the one compiled extension (the ingest pair kernels); everything else is in
pyproject.toml. The extension is optional: without a C compiler, ingest falls back to numba."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamtopic._pairs",
            ["streamtopic/_pairs.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
