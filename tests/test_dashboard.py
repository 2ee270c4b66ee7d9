"""The Grafana dashboard (deploy/grafana/stream-omni.json) asks only for metrics a real server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from testkit.fake_backend import FakeBackend

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "stream-omni.json"
NAME = re.compile(r"stream_omni:[A-Za-z0-9_:]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported(body: str) -> set[str]:
    """Every sample name ``/metrics`` can carry, from its families' types (a labelled family that has
    seen nothing yet still says its name and type)."""
    names = set()
    for fam in text_string_to_metric_families(body):
        names.update(fam.name + s for s in SUFFIXES.get(fam.type, ("",)))
    return names


def queried() -> dict[str, set[str]]:
    """Panel title → the metric names its queries use."""
    dash = json.loads(DASHBOARD.read_text())
    return {p["title"]: {n for t in p["targets"] for n in NAME.findall(t["expr"])} for p in dash["panels"]}


def test_every_metric_the_dashboard_queries_is_exported(server_factory):
    with server_factory(FakeBackend()) as addr:
        body = httpx.get(f"http://{addr}/metrics", timeout=30).text
    names = exported(body)
    assert "stream_omni:time_to_first_token_seconds_bucket" in names  # the parse saw the real families
    panels = queried()
    unknown = {title: sorted(used - names) for title, used in panels.items() if used - names}
    assert unknown == {}, f"queried but not exported: {unknown}"
    assert all(panels.values()), "a panel without a stream_omni metric"
    used = set().union(*panels.values())
    # what an operator asks first is on the dashboard: latency, load, sessions, voice, errors
    for key in (
        "stream_omni:time_to_first_token_seconds_bucket",
        "stream_omni:num_requests_running",
        "stream_omni:active_sessions",
        "stream_omni:voice_stage_seconds_bucket",
        "stream_omni:errors_total",
    ):
        assert key in used, key


def test_the_dashboard_is_well_formed():
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] == "stream-omni"
    for p in dash["panels"]:
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert p["datasource"]["uid"] == "${datasource}"
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]
