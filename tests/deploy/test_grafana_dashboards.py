"""The Grafana dashboards and provisioning files: structure Grafana relies on, and metric names that exist.

Dashboards are hand-edited JSON that nothing else validates: a datasource id pasted from one Grafana, a uid
that changes (and breaks every link), or a misspelled metric only shows up as an empty panel. These checks
catch that here; tests/deploy/test_prometheus_integration.py runs every query against a real Prometheus.
"""

from __future__ import annotations

import json
import pathlib
import re
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml
from prometheus_client import generate_latest

from sparkwatch.coordinator.api.metrics import coordinator_registry
from sparkwatch.coordinator.loop_lag import LoopLag
from sparkwatch.coordinator.remote_write.sender import WriterStats

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
RULES = ROOT / "deploy" / "prometheus" / "rules" / "sparkwatch.rules.yml"

#: Links, bookmarks and the compose home dashboard use these: renaming one is a breaking change.
STABLE_UIDS = {
    "node-overview.json": "sparkwatch-node-overview",
    "benchmark-run.json": "sparkwatch-benchmark-run",
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and annotation."""
    for panel in all_panels(dashboard):
        for t in panel.get("targets", []):
            yield f"panel {panel['id']} {panel['title']!r} {t['refId']}", t["expr"]
    for a in dashboard["annotations"]["list"]:
        if "expr" in a:
            yield f"annotation {a['name']!r}", a["expr"]


def variable_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, query) of the query variables (Grafana's label_values(), not PromQL)."""
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            yield f"variable {v['name']}", v["query"]["query"]


def metric_names(expr: str) -> set[str]:
    """The sparkwatch metric and recording-rule names an expression mentions (label values ignored)."""
    return {n for n in _NAME.findall(_QUOTED.sub('""', expr)) if "sparkwatch_" in n}


def recording_rules() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["record"]: r["expr"] for g in groups for r in g["rules"]}


def alert_rules() -> dict[str, str]:
    groups = yaml.safe_load((RULES.parent / "sparkwatch.alerts.rules.yml").read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def exposition_names(text: str) -> set[str]:
    """Names of the families an exposition announces (# TYPE) and of the samples it carries."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_the_two_dashboards_ship_with_stable_unique_uids() -> None:
    dashboards = load_dashboards()
    assert {name: d["uid"] for name, d in dashboards.items()} == STABLE_UIDS


@pytest.mark.parametrize("name", sorted(STABLE_UIDS))
def test_dashboard_structure(name: str) -> None:
    """What provisioning into any Grafana needs: no instance-specific ids, the datasource as a variable."""
    dash = load_dashboards()[name]
    assert dash["schemaVersion"] >= 39
    assert dash["id"] is None and "__inputs" not in dash  # a provisioned file, not an export for import
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds_var = variables["datasource"]
    assert ds_var["type"] == "datasource" and ds_var["query"] == "prometheus"
    node = variables["node"]
    assert node["type"] == "query" and node["datasource"] == DATASOURCE
    assert re.fullmatch(r"label_values\(sparkwatch_\w+, node\)", node["query"]["query"])
    assert node["multi"] and node["includeAll"] and node["allValue"] == ".*"

    ids = [p["id"] for p in all_panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in all_panels(dash):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            assert "targets" not in panel
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            assert t["datasource"] == DATASOURCE and t["expr"].strip(), panel["title"]
    for a in dash["annotations"]["list"]:
        assert a["datasource"] == DATASOURCE

    def datasource_refs(node: Any) -> Iterator[Any]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in {"datasource", "datasourceId"}:
                    yield value
                yield from datasource_refs(value)
        elif isinstance(node, list):
            for item in node:
                yield from datasource_refs(item)

    # Anywhere in the file (field overrides, transformations, …): only the variable, never an id or name.
    assert all(ref == DATASOURCE for ref in datasource_refs(dash))


@pytest.mark.parametrize("name", sorted(STABLE_UIDS))
def test_absent_values_are_not_shown_as_zero(name: str) -> None:
    """Unknown is an absent series: no query turns absence into a number, single-value panels say N/A
    and lines break at gaps instead of bridging them."""
    dash = load_dashboards()[name]
    for where, expr in dashboard_queries(dash):
        assert not re.search(r"\bvector\s*\(|\babsent(_over_time)?\s*\(", expr), (where, expr)
    for panel in all_panels(dash):
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        if panel["type"] in {"stat", "gauge", "table"}:
            assert defaults["noValue"] not in {"0", ""}, panel["title"]
        if panel["type"] == "timeseries":
            assert defaults["custom"]["spanNulls"] is False, panel["title"]


def test_field_support_table_shows_unsupported_as_na() -> None:
    panels = [
        p
        for p in all_panels(load_dashboards()["node-overview.json"])
        if any("sparkwatch_field_supported" in t["expr"] for t in p.get("targets", []))
    ]
    assert [p["type"] for p in panels] == ["table"]
    (mapping,) = panels[0]["fieldConfig"]["defaults"]["mappings"]
    assert mapping["options"]["0"]["text"] == "N/A" and mapping["options"]["1"]["text"] == "supported"


def test_benchmark_dashboard_annotates_runs_from_the_coordinator() -> None:
    annotations = load_dashboards()["benchmark-run.json"]["annotations"]["list"]
    runs = [a for a in annotations if "sparkwatch_coordinator_run_active" in a.get("expr", "")]
    assert len(runs) == 1 and runs[0]["enable"]
    assert "{{run_id}}" in runs[0]["titleFormat"]


def test_no_dashboard_relies_on_a_run_name_label() -> None:
    """The coordinator's /metrics label runs by id alone (a name is made from a command line, and /metrics
    has no token), so a panel, annotation or table that wants ``name`` would show nothing."""
    uses = []
    for file, dashboard in load_dashboards().items():
        text = json.dumps(dashboard)
        if "{{name}}" in text or re.search(r"\bname\s*(=|!=|=~|!~)\s*\\?\"", text):
            uses.append(f"{file}: a name label in a query or format")
        for panel in all_panels(dashboard):
            if "sparkwatch_coordinator_run_" not in json.dumps(panel.get("targets", [])):
                continue  # other tables have name columns of their own (the GPU's model name)
            for transform in panel.get("transformations", []):
                if "name" in (transform.get("options") or {}).get("indexByName", {}):
                    uses.append(f"{file}: panel {panel['title']!r} orders a run name column")
    assert uses == []


def test_every_metric_name_exists(agent_factory: Any, fake_nvml_dir: pathlib.Path) -> None:
    """Each sparkwatch name a dashboard or rule uses is served by a real agent (sim or fake GB10; families
    without a series, such as device memory on unified memory, are announced by their # TYPE line), by the
    coordinator, or is one of the shipped recording rules."""
    sim = agent_factory("--backend", "sim", "--node", "s")
    gb10 = agent_factory(
        "--node", "g", env={"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": "gb10"}
    )
    served: set[str] = set()
    for agent in (sim, gb10):
        with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as r:
            served |= exposition_names(r.read().decode())
    # The coordinator announces the same families whatever its state; an empty one is enough for names.
    writer = SimpleNamespace(stats=WriterStats(capacity=1))  # with remote write on: its families too
    idle = SimpleNamespace(
        now_ns=lambda: 0, states=list, runs=list, loop_lag=LoopLag(), meters={}, remote_writer=writer
    )
    served |= exposition_names(generate_latest(coordinator_registry(cast(Any, idle))).decode())
    assert {"sparkwatch_gpu_power_watts", "sparkwatch_coordinator_run_active"} <= served

    rules = recording_rules()
    used: dict[str, set[str]] = {}
    for name, dash in load_dashboards().items():
        for where, expr in [*dashboard_queries(dash), *variable_queries(dash)]:
            for metric in metric_names(expr):
                used.setdefault(metric, set()).add(f"{name} {where}")
    for record, expr in rules.items():
        for metric in metric_names(expr):
            used.setdefault(metric, set()).add(f"rule {record}")
    for alert, expr in alert_rules().items():
        for metric in metric_names(expr):
            used.setdefault(metric, set()).add(f"alert {alert}")
    assert len(used) > 20  # the extraction found the dashboards' names
    unknown = {m: sorted(w) for m, w in used.items() if m not in (rules if ":" in m else served)}
    assert unknown == {}


def test_provisioning_files() -> None:
    """Grafana loads the datasource and the dashboard folder; both point at what this repository ships."""
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    assert datasources["apiVersion"] == 1
    (ds,) = datasources["datasources"]
    # not the default: copied beside a site's own default datasource, two defaults stop Grafana starting
    assert ds["type"] == "prometheus" and ds["isDefault"] is False and ds["url"].startswith("http")
    # $__rate_interval is derived from timeInterval: it must be the agent job's scrape interval.
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    agent_job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "sparkwatch-agent")
    assert ds["jsonData"]["timeInterval"] == agent_job["scrape_interval"]

    providers = yaml.safe_load((PROVISIONING / "dashboards" / "sparkwatch.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
