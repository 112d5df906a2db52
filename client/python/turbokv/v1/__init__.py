"""Generated protobuf/gRPC stubs of proto/turbokv/v1/turbokv.proto (see scripts/gen_stubs.py)."""
