"""The deploy recipes: the Dockerfile installs with the README's command, compose runs docs/REPLICAS.md's
layout, and the Helm chart renders manifests that pass the Kubernetes schemas (offline)."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gateway.core.config import ConfigError, load_config
from tests.deploy.helmlite import render, render_text

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "stream-omni"
K8S = "1.37.0"  # the newest schemas kubernetes-validate ships (checked offline)


def dockerfile() -> list[str]:
    """Its instructions, continuation lines joined."""
    text = re.sub(r"\\\n\s*", "", (ROOT / "Dockerfile").read_text())
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_the_dockerfile_installs_with_the_readme_command():
    readme = (ROOT / "README.md").read_text()
    (serve,) = [line for line in readme.splitlines() if line.startswith("CMAKE_ARGS=") and "pip install -e . " in line]
    install = serve.removesuffix(" && stream-omni serve")
    assert install != serve, "the README's first command ends by starting the server"
    runs = [line.removeprefix("RUN ") for line in dockerfile() if line.startswith("RUN ")]
    assert install in runs, "the Dockerfile does not run the README's install command"
    assert [r for r in runs if "pip install" in r] == [install]  # and installs nothing else


def test_the_image_is_multi_stage_unprivileged_and_checks_ready():
    lines = dockerfile()
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) == 2 and stages[0].endswith(" AS build") and " AS " not in stages[1]
    runtime = lines[lines.index(stages[1]) :]
    assert not any(line.startswith("RUN") and "pip install" in line for line in runtime)  # no compiler here
    assert any(line.startswith("COPY --from=build /opt/venv") for line in runtime)
    (user,) = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert user.split(":")[0] not in ("root", "0")
    (check,) = [line for line in runtime if line.startswith("HEALTHCHECK ")]
    assert "http://127.0.0.1:8000/ready" in check
    assert runtime[-1].startswith("CMD ") and '"stream-omni", "serve"' in runtime[-1]
    assert "COPY deploy/container.yaml /etc/stream-omni/config.yaml" in runtime


@pytest.mark.parametrize("path", ["deploy/container.yaml", "deploy/compose/gateway.yaml"])
def test_the_container_configs_take_their_keys_from_the_environment(path, monkeypatch):
    with pytest.raises(ConfigError, match="STREAM_OMNI_API_KEYS holds no keys"):
        load_config(ROOT / path)  # no keys: refused, never an open gateway on 0.0.0.0
    monkeypatch.setenv("STREAM_OMNI_API_KEYS", "sk-one, sk-two")
    cfg = load_config(ROOT / path)
    assert cfg.server.host == "0.0.0.0" and cfg.server.api_keys == ("sk-one", "sk-two")


def test_compose_runs_replicas_and_redis_behind_the_nginx_block_of_replicas_md():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert set(compose) == {"redis", "gateway", "nginx"}
    gw = compose["gateway"]
    assert gw["deploy"]["replicas"] >= 2 and gw["build"] == "."
    assert gw["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "./deploy/compose/gateway.yaml:/etc/stream-omni/config.yaml:ro" in gw["volumes"]
    assert compose["nginx"]["depends_on"]["gateway"]["condition"] == "service_healthy"  # the image's /ready check
    assert compose["redis"]["command"][1:] == ["--save", "", "--appendonly", "no"]
    store = yaml.safe_load((ROOT / "deploy/compose/gateway.yaml").read_text())["replicas"]["store"]
    assert store == "redis://redis:6379/0"
    # the nginx block is docs/REPLICAS.md's (which tests/cluster/test_recipe.py runs), with compose's upstream
    doc = (ROOT / "docs/REPLICAS.md").read_text()
    documented = doc.split("```nginx\n", 1)[1].split("```", 1)[0]
    ours = (ROOT / "deploy/compose/nginx.conf").read_text()

    def body(conf: str) -> str:
        conf = "\n".join(line for line in conf.splitlines() if not line.lstrip().startswith("#"))
        return re.sub(r"upstream stream_omni \{.*?\}", "upstream", conf, flags=re.S).strip()

    assert body(ours) == body(documented)
    assert "server gateway:8000;" in ours


VARIANTS = {
    "defaults": {},
    "external Redis, own Secret, no autoscaling, traced": {
        "redis": {"deploy": False},
        "existingSecret": "gateway-keys",
        "autoscaling": {"enabled": False},
        "otel": {"endpoint": "http://otel-collector:4318"},
        "config": {"replicas": {"store": "redis://redis.example:6379/0"}, "tracing": {"enabled": True}},
    },
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_chart_renders_manifests_the_kubernetes_schemas_accept(variant):
    docs = render(CHART, values=VARIANTS[variant])
    for doc in docs:
        kubernetes_validate.validate(doc, K8S, strict=True)  # raises ValidationError naming the field
    kinds = sorted(d["kind"] for d in docs)
    if variant == "defaults":
        assert kinds == sorted(
            ["ConfigMap", "Deployment", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget"]
            + ["Secret", "Service", "Service"]
        )
    else:
        assert kinds == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"]


def test_a_manifest_the_schemas_refuse_is_refused():
    (deployment,) = [d for d in render(CHART) if d["kind"] == "Deployment" and d["metadata"]["name"] == "so"]
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S, strict=True)


def test_the_chart_wires_probes_config_keys_autoscaling_and_disruption_budget(monkeypatch, tmp_path):
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render(CHART, values=VARIANTS["defaults"])}
    dep = docs[("Deployment", "so")]
    pod = dep["spec"]["template"]
    (gw,) = pod["spec"]["containers"]
    assert gw["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert gw["livenessProbe"]["httpGet"]["path"] == "/health"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    labels = pod["metadata"]["labels"]
    for key in (("Service", "so"), ("PodDisruptionBudget", "so")):
        sel = docs[key]["spec"]["selector"]
        assert (sel.get("matchLabels") or sel) == labels, key
    # the ConfigMap's YAML is a config the gateway loads, with the keys the Secret puts in its environment
    config = docs[("ConfigMap", "so-config")]["data"]["config.yaml"]
    (key_ref,) = [e for e in gw["env"] if e["name"] == "STREAM_OMNI_API_KEYS"]
    secret = docs[("Secret", key_ref["valueFrom"]["secretKeyRef"]["name"])]
    monkeypatch.setenv("STREAM_OMNI_API_KEYS", secret["stringData"]["STREAM_OMNI_API_KEYS"])
    path = tmp_path / "config.yaml"
    path.write_text(config)
    cfg = load_config(path)
    assert cfg.replicas.store == "redis://stream-omni-redis:6379/0" and cfg.server.api_keys == ("change-me",)
    assert docs[("Service", "stream-omni-redis")]["spec"]["ports"][0]["port"] == 6379
    hpa = docs[("HorizontalPodAutoscaler", "so")]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "so"}
    assert hpa["metrics"][0]["pods"]["metric"]["name"] == "stream_omni_num_requests_running"


def test_the_renderer_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="unsupported pipe"):
        render_text("{{ .Values.x | b64enc }}", {"Values": {"x": "a"}})
    with pytest.raises(ValueError, match="without its end"):
        render_text("{{- if .Values.x }}a", {"Values": {"x": 1}})
    assert render_text("a\n{{- if not .Values.x }}\nb\n{{- else }}\nc\n{{- end }}\n", {"Values": {"x": 0}}) == "a\nb\n"
