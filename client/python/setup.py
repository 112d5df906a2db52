"""Build hooks of the turbokv-client wheel (all metadata lives in pyproject.toml):

* build_py generates the gRPC stubs (scripts/gen_stubs.py, with the pinned grpcio-tools of
  [build-system] requires) into the build folder, never into the source tree;
* it bundles the codec shared library (libturbokv_codec_c.so, for turbokv.codec.LocalCodec)
  from $TURBOKV_CODEC_LIB as turbokv/_lib/libturbokv_codec_c.so; the wheel is then tagged
  for this platform (py3-none-<platform>: the library is loaded with ctypes, no Python ABI).
  Without $TURBOKV_CODEC_LIB the wheel is pure Python and LocalCodec looks for the library
  at run time (turbokv/codec.py). $TURBOKV_REQUIRE_CODEC_LIB=1 makes a missing library an
  error.

The project command that builds the wheel is tools/build_wheel.sh.
"""
import importlib.util
import os
import pathlib
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover - setuptools >= 70 ships its own
    from setuptools.command.bdist_wheel import bdist_wheel  # type: ignore

HERE = pathlib.Path(__file__).resolve().parent
LIB_NAME = "libturbokv_codec_c.so"


def _codec_lib():
    p = os.environ.get("TURBOKV_CODEC_LIB", "")
    if p and not os.path.isfile(p):
        raise FileNotFoundError("TURBOKV_CODEC_LIB=%s does not exist" % p)
    if not p and os.environ.get("TURBOKV_REQUIRE_CODEC_LIB") == "1":
        raise FileNotFoundError("TURBOKV_REQUIRE_CODEC_LIB=1 but TURBOKV_CODEC_LIB is unset")
    return p or None


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        spec = importlib.util.spec_from_file_location("turbokv_gen_stubs",
                                                      HERE / "scripts" / "gen_stubs.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.generate(out_root=self.build_lib, force=True)
        lib = _codec_lib()
        if lib:
            dst = pathlib.Path(self.build_lib) / "turbokv" / "_lib"
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lib, dst / LIB_NAME)


class BinaryDistribution(Distribution):
    """A wheel with the codec library is platform-specific (platlib, not purelib)."""

    def has_ext_modules(self):
        return _codec_lib() is not None


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if _codec_lib() is not None else (python, abi, plat)


setup(cmdclass={"build_py": BuildPyWithStubs, "bdist_wheel": PlatformWheel},
      distclass=BinaryDistribution)
