"""Build hook: generates the gRPC stubs (scripts/gen_stubs.py) before packaging, and derives
the grpcio / protobuf lower bounds from the grpcio-tools that generated them (generated code
checks the runtime versions at import and refuses older ones).

All other metadata lives in pyproject.toml.
"""
import importlib.metadata
import importlib.util
import pathlib
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


def _gen_stubs_module():
    spec = importlib.util.spec_from_file_location("turbokv_gen_stubs",
                                                  HERE / "scripts" / "gen_stubs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _generate():
    return _gen_stubs_module().generate(out_root=HERE)


def _requirements():
    out_dir = _generate()
    reqs = ["numpy>=1.22"]
    pb2 = (out_dir / "turbokv_pb2.py").read_text()
    m = re.search(r"Protobuf Python Version: ([0-9.]+)", pb2)
    reqs.append("protobuf>=%s" % m.group(1) if m else "protobuf>=4.21")
    grpc = (out_dir / "turbokv_pb2_grpc.py").read_text()
    m = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", grpc)
    if m:
        reqs.append("grpcio>=%s" % m.group(1))
    else:
        try:
            reqs.append("grpcio>=%s" % importlib.metadata.version("grpcio-tools"))
        except importlib.metadata.PackageNotFoundError:
            reqs.append("grpcio>=1.51")
    return reqs


class BuildPyWithStubs(build_py):
    def run(self):
        _generate()
        super().run()


setup(cmdclass={"build_py": BuildPyWithStubs}, install_requires=_requirements())
