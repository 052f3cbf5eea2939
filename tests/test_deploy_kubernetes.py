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
    assert pod["terminationGracePeriodSeconds"] > 10 + 20  # the bot drains 10 s, then hands fleet jobs back
    assert pod["automountServiceAccountToken"] is False
    assert by_kind()["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
