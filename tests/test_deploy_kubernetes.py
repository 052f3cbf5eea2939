"""The Kubernetes manifests (deploy/kubernetes/base, a Kustomize base) pass kubernetes-validate's strict
schema check (PyPI, offline schemas) and keep the promises docs/scale-out.md makes: two replicas, the
database URL from a Secret, probes on the bot's own endpoints, non-root with a read-only root file
system, resource requests, and a grace period longer than the bot's drain."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.ops.health import HEALTHZ, READYZ

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "deploy" / "kubernetes" / "base"


def validator() -> str:
    path = Path(sys.executable).parent / "kubernetes-validate"
    found = str(path) if path.exists() else shutil.which("kubernetes-validate")
    if not found:
        pytest.fail("kubernetes-validate is not installed: pip install -e '.[test]'")
    return found


def resources() -> list[Path]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    return [BASE / name for name in kustomization["resources"]]


def by_kind() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for path in resources() for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))}


def test_kustomization_lists_every_manifest_and_each_passes_strict_validation() -> None:
    listed = {p.name for p in resources()}
    assert listed == {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    result = subprocess.run([validator(), "--strict", "--quiet", *map(str, resources())],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_validator_rejects_a_broken_manifest(tmp_path: Path) -> None:
    broken = tmp_path / "deployment.yaml"
    broken.write_text((BASE / "deployment.yaml").read_text().replace("readinessProbe:", "readynessProbe:"))
    result = subprocess.run([validator(), "--strict", "--quiet", str(broken)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0 and "readynessProbe" in result.stdout + result.stderr


def test_deployment_keeps_the_scale_out_promises() -> None:
    deployment = by_kind()["Deployment"]
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    (bot,) = pod["containers"]
    assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    env = {e["name"]: e for e in bot["env"]}
    assert env["VLLM_DOCTOR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "database-url"
    assert "value" not in env["SLACK_BOT_TOKEN"]  # secrets only from the Secret
    assert bot["livenessProbe"]["httpGet"]["path"] == HEALTHZ and bot["readinessProbe"]["httpGet"]["path"] == READYZ
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] >= 10000
    assert bot["securityContext"]["readOnlyRootFilesystem"] is True
    assert bot["securityContext"]["allowPrivilegeEscalation"] is False
    assert bot["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(bot["resources"]["requests"]) and {"cpu", "memory"} <= set(bot["resources"]["limits"])
    config = by_kind()["ConfigMap"]["data"]
    pre_stop = int(bot["lifecycle"]["preStop"]["exec"]["command"][-1])
    drain = pre_stop + float(config["VLLM_DOCTOR_DRAIN_DELAY"]) + float(config["VLLM_DOCTOR_DRAIN"])
    assert pod["terminationGracePeriodSeconds"] > drain  # hand-back happens before the kubelet's SIGKILL
    assert pod["automountServiceAccountToken"] is False
    assert by_kind()["PodDisruptionBudget"]["spec"]["minAvailable"] == 1


def test_issue_28_deploy_findings_stay_fixed() -> None:
    """Image by registry (digest in overlays), preStop delay, probes that fit the endpoints, a writable
    KB and index on a read-only root, SSH/inventory mounts, Socket Mode's token required, strict spread,
    and a NetworkPolicy that names its sources and its egress."""
    kinds = by_kind()
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (bot,) = pod["containers"]
    assert "." in bot["image"].split("/")[0] and ":" in bot["image"]  # a registry host, a tag
    kustomization = (BASE / "kustomization.yaml").read_text(encoding="utf-8")
    assert "@sha256:" in kustomization  # how an overlay pins the digest
    assert bot["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    from bot.slack.server import READY_DB_TIMEOUT_S
    assert bot["readinessProbe"]["timeoutSeconds"] > READY_DB_TIMEOUT_S
    config = kinds["ConfigMap"]["data"]
    mounts = {m["mountPath"]: m for m in bot["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for setting in ("VLLM_DOCTOR_KB_DIR", "VLLM_DOCTOR_INDEX_DIR"):
        (mount,) = [m for path, m in mounts.items() if config[setting].startswith(path + "/")]
        assert "emptyDir" in volumes[mount["name"]] and not mount.get("readOnly")
    (seed,) = pod["initContainers"]
    assert {m["name"] for m in seed["volumeMounts"]} == {mounts["/var/lib/vllm-doctor/data"]["name"]}
    assert volumes["ssh"]["secret"]["secretName"] == "vllm-doctor-ssh" and mounts["/home/doctor/.ssh"]["readOnly"]
    assert volumes["inventory"]["configMap"]["name"] == "vllm-doctor-inventory"
    env = {e["name"]: e for e in bot["env"]}
    assert "optional" not in env["SLACK_APP_TOKEN"]["valueFrom"]["secretKeyRef"]  # args ["serve"]: Socket Mode
    assert all(c["whenUnsatisfiable"] == "DoNotSchedule" for c in pod["topologySpreadConstraints"])
    policy = kinds["NetworkPolicy"]["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    assert all(rule.get("from") for rule in policy["ingress"])  # not open to every namespace
    egress_ports = {p["port"] for rule in policy["egress"] for p in rule["ports"]}
    assert {53, 443, 5432} <= egress_ports


def test_the_secret_example_is_valid_and_holds_every_key_the_deployment_reads() -> None:
    example = BASE.parent / "secret.example.yaml"
    result = subprocess.run([validator(), "--strict", "--quiet", str(example)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    secret = yaml.safe_load(example.read_text(encoding="utf-8"))
    (bot,) = by_kind()["Deployment"]["spec"]["template"]["spec"]["containers"]
    read = {e["valueFrom"]["secretKeyRef"]["key"] for e in bot["env"]
            if "secretKeyRef" in e.get("valueFrom", {}) and e["valueFrom"]["secretKeyRef"]["name"] == "vllm-doctor"}
    assert read == set(secret["stringData"])
    assert "kubectl create secret generic vllm-doctor" in example.read_text(encoding="utf-8")
