"""Loads the SGLang CPU stand-in (turbokv_sglang_cpu_standin.py) into every Python process that
has this folder on PYTHONPATH and TURBOKV_SGLANG_CPU_STANDIN=1 (the SGLang engine tests set both
for the servers they start, whose scheduler and detokenizer are child processes). Test-only."""
import os

if os.environ.get("TURBOKV_SGLANG_CPU_STANDIN") == "1":
    import turbokv_sglang_cpu_standin

    turbokv_sglang_cpu_standin.install()
