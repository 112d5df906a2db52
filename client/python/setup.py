"""Build hook: generates the gRPC stubs (scripts/gen_stubs.py) before packaging.

All metadata lives in pyproject.toml; this file only adds the code-generation step.
"""
import importlib.util
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


def _gen_stubs_module():
    spec = importlib.util.spec_from_file_location("turbokv_gen_stubs",
                                                  HERE / "scripts" / "gen_stubs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildPyWithStubs(build_py):
    def run(self):
        _gen_stubs_module().generate(out_root=HERE)
        super().run()


setup(cmdclass={"build_py": BuildPyWithStubs})
