"""Checks of deploy/: Kubernetes manifests against the Kubernetes JSON schemas (offline, from
the kubernetes-validate package), the wiring between the resources, the container recipes, and
the Grafana dashboard's freshness. Run by deploy/test/check.sh:

    python -m pytest -q deploy/test

The rendering is render.py (a kustomize subset, no kubectl needed); when kubectl is installed
its `kubectl kustomize` output must be identical.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.dirname(HERE)
REPO = os.path.dirname(DEPLOY)
OVERLAYS = ["cpu", "gpu", "mtls"]
# Oldest version with every field used here GA or beta-on (gRPC probes: 1.27), and a recent one.
K8S_VERSIONS = ["1.28.0", "1.32.0"]

sys.path.insert(0, HERE)
import render  # noqa: E402


def rendered(overlay):
    return render.render(os.path.join(DEPLOY, "k8s", "overlays", overlay))


def by_kind(resources):
    out = {}
    for r in resources:
        assert r["kind"] not in out, "two %s resources" % r["kind"]
        out[r["kind"]] = r
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(overlay, version):
    kv = pytest.importorskip("kubernetes_validate")
    seen = set()
    for r in rendered(overlay):
        if r["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: checked by test_servicemonitor_selects_the_service
        kv.validate(r, version, strict=True)  # raises ValidationError with the path
        seen.add(r["kind"])
    assert seen == {"ServiceAccount", "ConfigMap", "Service", "StatefulSet",
                    "PodDisruptionBudget"}


def test_schema_validation_rejects_a_broken_manifest():
    kv = pytest.importorskip("kubernetes_validate")
    sts = by_kind(rendered("cpu"))["StatefulSet"]
    sts["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = ["8"]
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, K8S_VERSIONS[-1], strict=True)
    sts = by_kind(rendered("cpu"))["StatefulSet"]
    sts["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grcp"] = {"port": 1}
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, K8S_VERSIONS[-1], strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_render_matches_kubectl_kustomize(overlay):
    out = subprocess.run(["kubectl", "kustomize", os.path.join(DEPLOY, "k8s", "overlays",
                                                                overlay)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    theirs = [d for d in yaml.safe_load_all(out) if d]
    key = lambda r: (r["kind"], r["metadata"]["name"])  # noqa: E731
    assert sorted(rendered(overlay), key=key) == sorted(theirs, key=key)


def _container(sts):
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_resources_are_wired_together(overlay):
    k = by_kind(rendered(overlay))
    sts, svc, pdb, cm = k["StatefulSet"], k["Service"], k["PodDisruptionBudget"], k["ConfigMap"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    # Headless Service governs the StatefulSet and selects its pods; so does the PDB.
    assert svc["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    for sel in (svc["spec"]["selector"], sts["spec"]["selector"]["matchLabels"],
                pdb["spec"]["selector"]["matchLabels"]):
        assert sel.items() <= pod_labels.items(), sel
    c = _container(sts)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9464, "health": 8081}
    assert {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]} == {"grpc": "grpc",
                                                                         "metrics": "metrics"}
    # Probes: the gRPC health service on the plaintext health-only port (kubelet's gRPC probes
    # cannot speak TLS); the gRPC port itself is TLS with bearer tokens, from mounted Secrets.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["health"], probe
    assert "--health-listen=0.0.0.0:%d" % ports["health"] in c["args"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    for flag, volume, secret, path in (
            ("--tls-cert", "tls", "turbokv-tls", "tls.crt"),
            ("--tls-key", "tls", "turbokv-tls", "tls.key"),
            ("--token-file", "auth", "turbokv-tokens", "tokens")):
        assert "%s=%s/%s" % (flag, mounts[volume], path) in c["args"], flag
        assert volumes[volume]["secret"]["secretName"] == secret
        assert not [m for m in c["volumeMounts"] if m["name"] == volume and "subPath" in m]
    # Mutual TLS (overlay mtls): the client CA is cert-manager's ca.crt of the same Secret.
    if overlay == "mtls":
        assert cm["data"]["TURBOKV_TLS_CLIENT_CA"] == mounts["tls"] + "/ca.crt"
    else:
        assert "TURBOKV_TLS_CLIENT_CA" not in cm["data"]
    # Listen addresses agree with the ports; every $(VAR) comes from the ConfigMap.
    assert "--listen=0.0.0.0:%d" % ports["grpc"] in c["args"]
    assert "--metrics-listen=0.0.0.0:%d" % ports["metrics"] in c["args"]
    # The ConfigMap is the container's environment (the server reads TURBOKV_<FLAG> itself);
    # args restate none of it.
    assert c["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]
    assert not [a for a in c["args"] if "$(" in a], c["args"]
    assert all(k.startswith("TURBOKV_") for k in cm["data"]), cm["data"]
    # Scrape annotations point at the metrics port.
    for meta in (svc["metadata"], sts["spec"]["template"]["metadata"]):
        a = meta["annotations"]
        assert (a["prometheus.io/scrape"], a["prometheus.io/port"], a["prometheus.io/path"]) == \
            ("true", str(ports["metrics"]), "/metrics")
    # One volume per pod, mounted at the data directory; non-root; requests and limits.
    (vct,) = sts["spec"]["volumeClaimTemplates"]
    assert {"name": vct["metadata"]["name"], "mountPath": "/data"} in c["volumeMounts"]
    assert "--data-dir=/data" in c["args"]
    pod_sc = sts["spec"]["template"]["spec"]["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert set(c["resources"]) == {"requests", "limits"}
    assert pdb["spec"]["maxUnavailable"] == 1
    gpu = "nvidia.com/gpu"
    if overlay == "gpu":
        assert c["resources"]["limits"][gpu] == 1 and c["resources"]["requests"][gpu] == 1
        assert cm["data"]["TURBOKV_CODEC_BACKEND"] == "cuda"
        assert c["image"].endswith("-cuda12.4")
    else:
        assert gpu not in c["resources"]["limits"] and gpu not in c["resources"]["requests"]
        assert cm["data"]["TURBOKV_CODEC_BACKEND"] == "cpu"
        assert c["image"] == "turbokv/turbokv-server:0.1.0"


def _server_binary():
    env = os.environ.get("TURBOKV_SERVER_BIN")
    if env:
        return env
    build = os.environ.get("TURBOKV_BUILD_DIR")
    cands = [os.path.join(build, "bin", "turbokv-server")] if build else []
    import glob
    cands += sorted(glob.glob(os.path.join(REPO, "build*", "bin", "turbokv-server")),
                    key=os.path.getmtime, reverse=True)
    return next((p for p in cands if os.access(p, os.X_OK)), None)


def _help_defaults(binary):
    """{ENV_NAME: default text} of every flag in `turbokv-server --help` (CLI11's
    `--flag TYPE[:CHECK]=DEFAULT (Env:NAME)` lines; "" when a flag has no default)."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s+--[\w-]+ (.*) \(Env:(\w+)\)$", line)
        if m:
            found[m.group(2)] = m.group(1).rsplit("=", 1)[1] if "=" in m.group(1) else ""
    assert found.get("TURBOKV_CAPACITY"), out
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_sets_only_what_the_deployment_changes(overlay):
    """One source of defaults: every ConfigMap key is one of the server's environment
    variables, and no value restates the server's own default."""
    binary = _server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    defaults = _help_defaults(binary)
    data = by_kind(rendered(overlay))["ConfigMap"]["data"]
    for key, value in data.items():
        assert key in defaults, "%s is not a turbokv-server variable (%s)" % (key, sorted(defaults))
        assert value != defaults[key], "%s=%s restates the server default" % (key, value)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_server_starts_with_the_rendered_flags(overlay, tmp_path):
    """The StatefulSet's args, with the ConfigMap as the environment (listen addresses moved
    to loopback, the data directory to a temporary one) start a real server: every flag and
    variable exists and every value is accepted. The GPU overlay requires CUDA: without a CUDA
    build it must fail for exactly that reason."""
    binary = _server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    k = by_kind(rendered(overlay))
    env = {k2: v for k2, v in os.environ.items() if not k2.startswith("TURBOKV_")}
    env.update(k["ConfigMap"]["data"])
    # The Secrets' files, made here: a certificate from openssl, a token file.
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    from pki import Pki, token_digest
    pki = Pki(str(tmp_path / "pki"))
    tokens = tmp_path / "tokens"
    tokens.write_text("token %s tenant-a\n" % token_digest("deploy-test-token"))
    local = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0",
             "--health-listen": "127.0.0.1:0", "--data-dir": str(tmp_path / "data"),
             "--tls-cert": pki.server_cert, "--tls-key": pki.server_key,
             "--token-file": str(tokens)}
    mtls = "TURBOKV_TLS_CLIENT_CA" in env
    if mtls:
        env["TURBOKV_TLS_CLIENT_CA"] = pki.ca
    args = ["%s=%s" % (a.split("=", 1)[0], local[a.split("=", 1)[0]])
            if a.split("=", 1)[0] in local else a for a in _container(k["StatefulSet"])["args"]]
    port_file = tmp_path / "ports"
    proc = subprocess.Popen([binary] + args + ["--port-file", str(port_file)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if port_file.exists() and len(port_file.read_text().split()) == 2:
                break
            time.sleep(0.05)
        if overlay == "gpu" and proc.poll() is not None:
            out = proc.stdout.read()
            assert proc.returncode != 0 and "--codec-backend=cuda" in out, out
            return
        assert proc.poll() is None, proc.stdout.read()
        assert len(port_file.read_text().split()) == 2
        _check_rendered_security(int(port_file.read_text().split()[0]), pki, mtls)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def _check_rendered_security(port, pki, mtls):
    """The rendered server's gRPC port speaks TLS and wants the token (and, with mtls, a
    client certificate): a client with the CA, its certificate and the token is answered, one
    without the token is UNAUTHENTICATED, one without a certificate fails the handshake."""
    from turbokv import Client, Security
    from turbokv.errors import StatusCode, TurboKVError
    cert = pki.client("deploy-client") if mtls else (None, None)
    address = "127.0.0.1:%d" % port

    def stats(**sec):
        with Client(address, timeout=10.0, max_attempts=1, security=Security(**sec)) as c:
            return c.stats()
    full = dict(ca_file=pki.ca, cert_file=cert[0], key_file=cert[1])
    assert stats(token="deploy-test-token", **full).namespaces == []
    with pytest.raises(TurboKVError) as e:
        stats(**full)
    assert e.value.code == StatusCode.UNAUTHENTICATED
    if mtls:
        with pytest.raises(TurboKVError) as e:
            stats(token="deploy-test-token", ca_file=pki.ca)
        assert e.value.code == StatusCode.UNAVAILABLE
    with pytest.raises(TurboKVError) as e:  # plaintext on the TLS port
        stats(token="deploy-test-token")
    assert e.value.code == StatusCode.UNAVAILABLE


def test_servicemonitor_selects_the_service():
    k = by_kind(rendered("cpu"))
    sm, svc = k["ServiceMonitor"], k["Service"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    for ep in sm["spec"]["endpoints"]:
        assert ep["port"] in port_names and ep["path"] == "/metrics"
        assert re.fullmatch(r"\d+s", ep["interval"])


DOCKERFILES = ["Dockerfile", "Dockerfile.cuda"]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_is_multistage_and_non_root(name):
    with open(os.path.join(DEPLOY, "docker", name)) as f:
        text = f.read()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) == 2 and froms[0].startswith("debian:bookworm")
    assert froms[1] == "debian:bookworm-slim"
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert "COPY --from=build /build/bin/turbokv-server" in text
    # Every folder the CMake build adds is copied into the build stage.
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        subdirs = set(re.findall(r"add_subdirectory\((\w+)\)", f.read()))
    copied = set(re.findall(r"^COPY (\w+) \1$", text, re.M))
    assert subdirs <= copied, subdirs - copied
    if name == "Dockerfile.cuda":
        assert "-DTURBOKV_ENABLE_CUDA=ON" in text and "cuda-cudart-" in text
    else:
        assert "-DTURBOKV_ENABLE_CUDA=OFF" in text


def _runtime_packages(name):
    with open(os.path.join(DEPLOY, "docker", name)) as f:
        text = f.read()
    runtime = text.split("# ---- runtime stage")[1]
    block = runtime.split("--no-install-recommends", 1)[1].split("&&", 1)[0]
    return set(block.replace("\\", " ").split())


@pytest.mark.parametrize("name", DOCKERFILES)
def test_runtime_image_has_every_shared_library(name):
    """Each library the built server links (ldd) belongs to a package of the runtime stage (or
    to debian:bookworm-slim's base: libc6, libstdc++6, libgcc-s1)."""
    binary = _server_binary()
    if binary is None or shutil.which("ldd") is None or shutil.which("dpkg") is None:
        pytest.skip("needs the server binary, ldd and dpkg")
    libs = re.findall(r"=> (/\S+)", subprocess.run(["ldd", binary], capture_output=True,
                                                    text=True).stdout)
    pkgs = set()
    for lib in libs:
        if "libcudart" in lib or "libcuda" in lib:
            continue
        real = os.path.realpath(lib)
        out = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
        if out.returncode != 0:  # /lib -> /usr/lib merged paths
            out = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
        assert out.returncode == 0, lib
        pkgs.add(out.stdout.split(":")[0])
    base = {"libc6", "libstdc++6", "libgcc-s1"}
    assert pkgs - base <= _runtime_packages(name), sorted(pkgs - base - _runtime_packages(name))


def test_dashboard_json_is_generated_from_make_dashboard():
    p = subprocess.run([sys.executable, os.path.join(DEPLOY, "grafana", "make_dashboard.py"),
                        "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
