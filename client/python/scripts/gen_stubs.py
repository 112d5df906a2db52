#!/usr/bin/env python3
"""Generates the Python protobuf/gRPC stubs of proto/turbokv/v1/turbokv.proto.

Writes turbokv/v1/turbokv_pb2.py, turbokv_pb2.pyi and turbokv_pb2_grpc.py next to the package
(they are not checked in: the generated code is tied to the grpcio-tools/protobuf versions of
the environment that runs it). `pip install ./client/python` runs this at build time; tests and
development checkouts run it directly:

    python3 client/python/scripts/gen_stubs.py [--proto-dir DIR] [--force]

Needs grpcio-tools. The proto is looked up in --proto-dir, $TURBOKV_PROTO_DIR, or the
repository's proto/ folder (two levels above client/python).
"""
import argparse
import os
import pathlib
import sys

PKG_ROOT = pathlib.Path(__file__).resolve().parent.parent  # client/python
PROTO_REL = "turbokv/v1/turbokv.proto"
OUTPUTS = ("turbokv_pb2.py", "turbokv_pb2.pyi", "turbokv_pb2_grpc.py")


def find_proto_dir(explicit=None):
    candidates = [explicit, os.environ.get("TURBOKV_PROTO_DIR"), PKG_ROOT.parent.parent / "proto"]
    for c in candidates:
        if c and (pathlib.Path(c) / PROTO_REL).is_file():
            return pathlib.Path(c)
    return None


def stubs_current(proto_dir, out_root=PKG_ROOT):
    """True when all outputs exist and are newer than the proto."""
    out_dir = pathlib.Path(out_root) / "turbokv" / "v1"
    outs = [out_dir / o for o in OUTPUTS]
    if not all(o.is_file() for o in outs):
        return False
    if proto_dir is None:
        return True
    src = (proto_dir / PROTO_REL).stat().st_mtime
    return all(o.stat().st_mtime >= src for o in outs)


def generate(proto_dir=None, out_root=PKG_ROOT, force=False):
    """Generates the stubs under out_root/turbokv/v1/. Returns the output directory."""
    proto_dir = find_proto_dir(proto_dir)
    out_dir = pathlib.Path(out_root) / "turbokv" / "v1"
    if proto_dir is None:
        if stubs_current(None, out_root):
            return out_dir  # e.g. building from an sdist that carries the generated files
        raise FileNotFoundError(
            "cannot find %s: pass --proto-dir or set TURBOKV_PROTO_DIR to the repository's "
            "proto/ folder" % PROTO_REL)
    if not force and stubs_current(proto_dir, out_root):
        return out_dir
    try:
        from grpc_tools import protoc
        import importlib.resources as resources
    except ImportError as e:  # pragma: no cover
        raise ImportError("generating the turbokv stubs needs grpcio-tools "
                          "(pip install grpcio-tools)") from e
    well_known = str(resources.files("grpc_tools") / "_proto")
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", "-I%s" % proto_dir, "-I%s" % well_known,
            "--python_out=%s" % out_root, "--pyi_out=%s" % out_root,
            "--grpc_python_out=%s" % out_root, str(proto_dir / PROTO_REL)]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError("grpc_tools.protoc failed with exit code %d" % rc)
    return out_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proto-dir", help="folder holding turbokv/v1/turbokv.proto")
    ap.add_argument("--out-root", default=str(PKG_ROOT), help="folder holding the turbokv package")
    ap.add_argument("--force", action="store_true", help="regenerate even when up to date")
    a = ap.parse_args()
    out = generate(a.proto_dir, a.out_root, a.force)
    print("stubs in", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
