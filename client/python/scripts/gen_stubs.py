#!/usr/bin/env python3
"""Generates the Python protobuf/gRPC stubs of proto/turbokv/v1/turbokv.proto.

Writes OUT_ROOT/turbokv/v1/{__init__.py, turbokv_pb2.py, turbokv_pb2.pyi,
turbokv_pb2_grpc.py}; never into the source tree (the wheel build writes into its build
folder, tools/setup.sh into $BUILD/python, which the checkout's ``turbokv`` package picks up
through ``pkgutil.extend_path`` when that folder is on sys.path).

Generator: the grpcio-tools version pinned in pyproject.toml's [build-system] requires, on
purpose an old one: protoc 25 code has no runtime-version check and runs on protobuf 4.21
through 7.x and grpcio 1.51 and newer (tests/python/test_wheel.py checks both ends), so
installing the client into a serving stack never moves its grpcio/protobuf. Newer
generators emit code that refuses older runtimes. When the running interpreter does not have
the pinned version, ``--venv DIR`` makes (once) a small venv with it and runs there.

    python3 client/python/scripts/gen_stubs.py --out-root build/python --venv build/stubgen-venv
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys

PKG_ROOT = pathlib.Path(__file__).resolve().parent.parent  # client/python
PROTO_REL = "turbokv/v1/turbokv.proto"
OUTPUTS = ("__init__.py", "turbokv_pb2.py", "turbokv_pb2.pyi", "turbokv_pb2_grpc.py")
INIT = ('"""Generated protobuf/gRPC stubs of proto/turbokv/v1/turbokv.proto '
        '(client/python/scripts/gen_stubs.py, grpcio-tools %s)."""\n')


def pinned_generator():
    """The grpcio-tools version of pyproject.toml's build requirements."""
    text = (PKG_ROOT / "pyproject.toml").read_text()
    m = re.search(r'"grpcio-tools==([0-9.]+)"', text)
    if not m:
        raise RuntimeError("pyproject.toml pins no grpcio-tools==X in [build-system] requires")
    return m.group(1)


def find_proto_dir(explicit=None):
    candidates = [explicit, os.environ.get("TURBOKV_PROTO_DIR"), PKG_ROOT / "proto",
                  PKG_ROOT.parent.parent / "proto"]
    for c in candidates:
        if c and (pathlib.Path(c) / PROTO_REL).is_file():
            return pathlib.Path(c)
    return None


def stubs_current(proto_dir, out_root):
    """True when all outputs exist, are newer than the proto and come from the pinned
    generator."""
    out_dir = pathlib.Path(out_root) / "turbokv" / "v1"
    outs = [out_dir / o for o in OUTPUTS]
    if not all(o.is_file() for o in outs):
        return False
    if pinned_generator() not in (out_dir / "__init__.py").read_text():
        return False
    if proto_dir is None:
        return True
    src = (proto_dir / PROTO_REL).stat().st_mtime
    return all(o.stat().st_mtime >= src for o in outs)


def _installed_generator():
    try:
        import importlib.metadata as md
        return md.version("grpcio-tools")
    except Exception:  # not installed
        return None


def generate(out_root, proto_dir=None, force=False, allow_other_generator=False):
    """Generates the stubs under out_root/turbokv/v1/ with this interpreter's grpcio-tools.
    Returns the output directory."""
    proto_dir = find_proto_dir(proto_dir)
    out_root = pathlib.Path(out_root).resolve()
    out_dir = out_root / "turbokv" / "v1"
    if proto_dir is None:
        raise FileNotFoundError(
            "cannot find %s: pass --proto-dir or set TURBOKV_PROTO_DIR to the repository's "
            "proto/ folder" % PROTO_REL)
    if out_root == PKG_ROOT:
        raise ValueError("refusing to write generated stubs into the source tree (%s)"
                         % (out_dir,))
    if not force and stubs_current(proto_dir, out_root):
        return out_dir
    want, have = pinned_generator(), _installed_generator()
    if have != want and not allow_other_generator:
        raise RuntimeError(
            "grpcio-tools %s is installed, the stubs are generated with %s (pyproject.toml): "
            "pass --venv DIR, or install grpcio-tools==%s" % (have, want, want))
    import importlib.resources as resources

    from grpc_tools import protoc
    well_known = str(resources.files("grpc_tools") / "_proto")
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", "-I%s" % proto_dir, "-I%s" % well_known,
            "--python_out=%s" % out_root, "--pyi_out=%s" % out_root,
            "--grpc_python_out=%s" % out_root, str(proto_dir / PROTO_REL)]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError("grpc_tools.protoc failed with exit code %d" % rc)
    (out_dir / "__init__.py").write_text(INIT % have)
    return out_dir


def _in_venv(venv, argv):
    """Re-runs this script in venv (made with the pinned grpcio-tools when missing)."""
    venv = pathlib.Path(venv).resolve()
    py = venv / "bin" / "python"
    want = pinned_generator()
    marker = venv / ".grpcio-tools"
    if not py.exists() or not marker.exists() or marker.read_text().strip() != want:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "grpcio-tools==%s" % want], check=True)
        marker.write_text(want + "\n")
    return subprocess.run([str(py), __file__] + argv).returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-root", required=True,
                    help="folder to write turbokv/v1/ into (outside client/python)")
    ap.add_argument("--proto-dir", help="folder holding turbokv/v1/turbokv.proto")
    ap.add_argument("--venv", help="venv with the pinned grpcio-tools (made when missing)")
    ap.add_argument("--force", action="store_true", help="regenerate even when up to date")
    a = ap.parse_args()
    proto_dir = find_proto_dir(a.proto_dir)
    if a.venv and _installed_generator() != pinned_generator():
        if not a.force and stubs_current(proto_dir, a.out_root):
            return 0
        argv = ["--out-root", str(pathlib.Path(a.out_root).resolve())]
        if proto_dir:
            argv += ["--proto-dir", str(proto_dir)]
        if a.force:
            argv.append("--force")
        return _in_venv(a.venv, argv)
    out = generate(a.out_root, proto_dir, a.force)
    print("stubs in", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
