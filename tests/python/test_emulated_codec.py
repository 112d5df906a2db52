"""The numpy port of the codec used by issue 12's study (bench/quality/emulated_codec.py)
against the codec's C ABI: same indices and scales in the packed bytes, same decoded values
(skipped, saying why, when the codec shared library is missing)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench", "quality"))


def _codec_or_skip():
    from turbokv import codec
    try:
        codec.load_library()
    except codec.CodecUnavailable as e:
        pytest.skip(str(e))


def test_port_matches_the_c_abi():
    _codec_or_skip()
    import emulated_codec
    res = emulated_codec.check_against_c_abi(n_vectors=256)
    assert len(res) == 24
    for name, r in res.items():  # bit for bit: same float operations in the same order
        assert r["index_mismatches"] == 0, name
        assert r["scale_mismatches"] == 0, name
        assert r["max_abs_decoded_diff"] == 0.0, name


def test_fractional_bits_sit_between_the_whole_widths():
    import emulated_codec as e
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2048, 64)).astype(np.float16).astype(np.float32)
    signs = e.rotation_signs(e.DEFAULT_ROTATION_SEED, 0, 0, 64)

    def rel(spec):
        xh = e.quantize_section(x, spec, signs)
        return float(((x - xh) ** 2).sum() / (x * x).sum())

    m4, m45, m5 = rel(e.SectionSpec(4, 64)), rel(e.SectionSpec(4, 64, 32)), rel(e.SectionSpec(5, 64))
    assert m5 < m45 < m4
    # half the coordinates at 5 bits: about the mean of the two errors
    assert m45 == pytest.approx((m4 + m5) / 2, rel=0.05)
    assert e.SectionSpec(4, 64, 32).value_bits() == 4.75


def test_bpv_counts_header_scales_and_means():
    import emulated_codec as e

    from turbokv.codec import CodecParams, LocalCodec
    _codec_or_skip()
    c = e.EmuCodec(e.SectionSpec(5, 32), e.SectionSpec(4, 64))
    ref = LocalCodec(30, 16, 3, 64, CodecParams(key_bits=5, key_group_size=32, value_bits=4,
                                                value_group_size=64))
    assert c.bpv(30, 3, 64, 16) == pytest.approx(ref.bits_per_value, abs=1e-9)
    centred = e.EmuCodec(e.SectionSpec(5, 32), e.SectionSpec(4, 64), centre_keys=True)
    assert centred.bpv(30, 3, 64, 16) - c.bpv(30, 3, 64, 16) == pytest.approx(0.5)
    assert centred.bpv(30, 3, 64, 256) - c.bpv(30, 3, 64, 256) == pytest.approx(1 / 32)
