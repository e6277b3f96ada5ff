"""The Kubernetes manifests (deploy/k8s/) against the API's schemas,
offline (kubernetes-validate, strict: no field the API does not know), and
what a board's pod needs: the NPU node selector, the device and runtime
mounts, readiness on /ready and liveness on /health, a grace period no
shorter than the server's drain, resources, and a ConfigMap whose
config.toml is the one the container reads."""

import pathlib
import tomllib

import kubernetes_validate
import pytest
import yaml

from conftest import ROOT

K8S = ROOT / "deploy" / "k8s"
# The oldest Kubernetes still common on boards (k3s from Debian-based
# images) and the newest the validator knows.
VERSIONS = ["1.28.0", "1.37.0"]
# What systemd gives the server to stop (TimeoutStopSec in the unit).
DRAIN_SECS = 15


def manifests():
    return sorted(K8S.glob("*.yaml"))


def load(name: str) -> dict:
    return yaml.safe_load((K8S / name).read_text())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifests(), ids=lambda p: p.name)
def test_each_manifest_is_valid_against_the_api_schemas(path: pathlib.Path, version: str):
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, version, strict=True)


def test_a_field_the_api_does_not_know_is_refused():
    daemonset = load("daemonset.yaml")
    daemonset["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, VERSIONS[-1], strict=True)


def test_the_daemonset_runs_where_the_npu_is_with_what_it_needs():
    daemonset = load("daemonset.yaml")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["rkllm.io/npu"] == "rk3588"
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    assert pod["terminationGracePeriodSeconds"] >= DRAIN_SECS
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["ports"][0]["containerPort"] == 8080
    assert container["resources"]["requests"] and container["resources"]["limits"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["npu"] == "/dev/dri" and volumes["npu"]["hostPath"]["path"] == "/dev/dri"
    assert volumes["runtime"]["hostPath"]["path"] == mounts["runtime"] == "/usr/lib/librkllmrt.so"
    assert mounts["state"] == "/var/lib/rkllm-server"
    assert mounts["config"] == "/etc/rkllm-server"
    assert volumes["config"]["configMap"]["name"] == load("configmap.yaml")["metadata"]["name"]
    # The Service selects these pods.
    service = load("service.yaml")
    assert service["spec"]["selector"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


def test_the_configmap_holds_a_config_for_the_npu_that_the_pod_reads():
    config = tomllib.loads(load("configmap.yaml")["data"]["config.toml"])
    assert config["backend"] == "rkllm"
    assert config["listen"] == "0.0.0.0:8080"
    daemonset = load("daemonset.yaml")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert "/etc/rkllm-server/config.toml" in container["args"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert config["runtime"] == mounts["runtime"]
    assert all(m["path"].startswith(mounts["state"]) for m in config["models"])
