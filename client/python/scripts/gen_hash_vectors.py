#!/usr/bin/env python3
"""Regenerates turbokv/hash_vectors.json: test vectors of the prefix-hash contract.

The contract (client/include/turbokv/client/prefix_hasher.h):
    h_{-1} = SHA-256(namespace_id as 8 bytes little-endian)
    h_i    = SHA-256(h_{i-1} || tokens of block i as uint32 little-endian || extra_key)
Only full blocks are hashed. This generator spells the contract out with hashlib and struct
directly (it does not import turbokv), so the C++ and Python implementations are both checked
against an independent transcription of it.

Usage: python3 client/python/scripts/gen_hash_vectors.py  (rewrites the file in place)
"""
import hashlib
import json
import pathlib
import struct


def chain(namespace_id, tokens, block_tokens, extra_key):
    h = hashlib.sha256(struct.pack("<Q", namespace_id)).digest()
    root = h
    out = []
    for i in range(len(tokens) // block_tokens):
        block = tokens[i * block_tokens:(i + 1) * block_tokens]
        h = hashlib.sha256(h + struct.pack("<%dI" % len(block), *block) + extra_key).digest()
        out.append(h.hex())
    return root.hex(), out


CASES = [
    # name, namespace_id, block_tokens, tokens, extra_key
    ("empty_chain", 0, 16, [], b""),
    ("partial_only", 1, 4, [1, 2, 3], b""),
    ("one_block", 0x0123456789ABCDEF, 4, [1, 2, 3, 4], b""),
    ("trailing_partial_dropped", 0x0123456789ABCDEF, 4, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], b""),
    ("block_tokens_1", 42, 1, [0, 1, 65535, 65536], b""),
    ("high_namespace_bit", 0xFFFFFFFFFFFFFFFF, 2, [4294967295, 0, 2147483648, 7], b""),
    ("extra_key", 0x0123456789ABCDEF, 4, [1, 2, 3, 4, 5, 6, 7, 8], b"lora:adapter-7"),
    ("extra_key_binary", 7, 3, [9, 8, 7, 6, 5, 4], bytes(range(0, 256, 17))),
    ("vllm_16", 0x5EED, 16, [(i * 7919) % 49152 for i in range(40)], b""),
]


def main():
    vectors = []
    for name, ns, bt, tokens, extra in CASES:
        root, hashes = chain(ns, tokens, bt, extra)
        vectors.append({
            "name": name,
            "namespace_id": "%016x" % ns,
            "block_tokens": bt,
            "extra_key_hex": extra.hex(),
            "tokens": tokens,
            "root_hash": root,
            "block_hashes": hashes,
        })
    doc = {
        "contract": "h_-1 = SHA-256(namespace_id u64 LE); h_i = SHA-256(h_{i-1} || block i "
                    "tokens as u32 LE || extra_key); full blocks only; 32-byte hashes",
        "generator": "client/python/scripts/gen_hash_vectors.py",
        "vectors": vectors,
    }
    path = pathlib.Path(__file__).resolve().parent.parent / "turbokv" / "hash_vectors.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
