#!/usr/bin/env python3
"""Renders a kustomization (deploy/k8s/...) without kubectl: the subset of kustomize that
deploy/k8s uses, so CI can validate the manifests offline on a machine without kubectl.

Supported kustomization fields (anything else is an error, so a new field cannot be silently
ignored): ``resources`` (files, or folders holding a kustomization.yaml), ``labels``
(``pairs`` with ``includeSelectors``), ``images`` (``name`` with ``newName`` / ``newTag``),
``patches`` (``path`` to a strategic-merge patch matched by kind and metadata.name; lists of
objects merge by ``name``, other lists and scalars are replaced). ``check.sh`` compares this
rendering with ``kubectl kustomize`` whenever kubectl is installed.

    python deploy/test/render.py deploy/k8s/overlays/cpu > cpu.yaml
"""
from __future__ import annotations

import copy
import os
import sys

import yaml

_KNOWN = {"apiVersion", "kind", "resources", "labels", "images", "patches"}
_WORKLOADS = {"StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job"}


def _load_all(path: str) -> list[dict]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def _merge(base, patch):
    """Strategic merge of `patch` into `base` (maps recurse, named lists merge by name)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = _merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        for p in patch:
            for i, b in enumerate(out):
                if b["name"] == p["name"]:
                    out[i] = _merge(b, p)
                    break
            else:
                out.append(copy.deepcopy(p))
        return out
    return copy.deepcopy(patch)


def _add(d: dict, path: list[str], pairs: dict) -> None:
    for k in path:
        d = d.setdefault(k, {})
    d.update(pairs)


def _apply_labels(res: dict, pairs: dict, selectors: bool) -> None:
    _add(res, ["metadata", "labels"], pairs)
    if not selectors:
        return
    kind, spec = res.get("kind"), res.get("spec", {})
    if kind == "Service":
        _add(res, ["spec", "selector"], pairs)
    if kind in _WORKLOADS or kind == "PodDisruptionBudget":
        _add(res, ["spec", "selector", "matchLabels"], pairs)
    if kind in _WORKLOADS:
        _add(res, ["spec", "template", "metadata", "labels"], pairs)
        affinity = spec.get("template", {}).get("spec", {}).get("affinity", {})
        for a in ("podAffinity", "podAntiAffinity"):
            for rule in ("requiredDuringSchedulingIgnoredDuringExecution",
                         "preferredDuringSchedulingIgnoredDuringExecution"):
                for term in affinity.get(a, {}).get(rule, []):
                    term = term.get("podAffinityTerm", term)
                    _add(term, ["labelSelector", "matchLabels"], pairs)
    if kind == "StatefulSet":
        for t in spec.get("volumeClaimTemplates", []):
            _add(t, ["metadata", "labels"], pairs)


def _containers(res: dict):
    pod = res.get("spec", {}).get("template", {}).get("spec", {})
    return pod.get("containers", []) + pod.get("initContainers", [])


def render(folder: str) -> list[dict]:
    """The resources of the kustomization in `folder`, in kustomize's output order."""
    k = _load_all(os.path.join(folder, "kustomization.yaml"))[0]
    unknown = set(k) - _KNOWN
    if unknown:
        raise ValueError("%s: unsupported kustomization fields %s" % (folder, sorted(unknown)))
    out: list[dict] = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(folder, r))
        out.extend(render(p) if os.path.isdir(p) else _load_all(p))
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            raise ValueError("%s: only `patches: - path:` is supported" % folder)
        for doc in _load_all(os.path.join(folder, patch["path"])):
            targets = [i for i, r in enumerate(out) if r["kind"] == doc["kind"]
                       and r["metadata"]["name"] == doc["metadata"]["name"]]
            if len(targets) != 1:
                raise ValueError("patch %s matches %d resources" % (patch["path"], len(targets)))
            out[targets[0]] = _merge(out[targets[0]], doc)
    for lab in k.get("labels", []):
        for r in out:
            _apply_labels(r, lab["pairs"], bool(lab.get("includeSelectors", False)))
    for img in k.get("images", []):
        for r in out:
            for c in _containers(r):
                name = c["image"].split("@")[0].rsplit(":", 1)[0] if ":" in c["image"].split(
                    "/")[-1] else c["image"]
                if name == img["name"]:
                    c["image"] = "%s:%s" % (img.get("newName", name), img["newTag"]) \
                        if "newTag" in img else img.get("newName", name)
    return out


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: render.py KUSTOMIZATION_FOLDER")
    yaml.safe_dump_all(render(argv[1]), sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv)
