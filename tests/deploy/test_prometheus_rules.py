"""deploy/: the Prometheus config and rules pass promtool, the rules' unit tests pass, and the compose stack
mounts files that exist and fit together.

promtool is what Prometheus itself runs on load, so a config or rule it rejects would leave a node
unscraped or a dashboard empty. The rules' numbers (gating, energy rate) are asserted by promtool's rule
unit tests in deploy/prometheus/tests/; docker is not available here, so the compose stack is checked
statically, including a promtool run on the /etc/prometheus its mounts assemble.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
COMPOSE = ROOT / "deploy" / "compose"
RULES = PROM / "rules" / "sparkwatch.rules.yml"
ALERTS = PROM / "rules" / "sparkwatch.alerts.rules.yml"

#: level:metric:operations (https://prometheus.io/docs/practices/rules/); a bare leading ':' is "all nodes".
_RULE_NAME = re.compile(r"(|node|node_gpu):(sparkwatch_[a-z0-9_]+):([a-z0-9_]+)")


def promtool(*args: str, cwd: pathlib.Path = ROOT) -> tuple[int, str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool missing: install the Debian package prometheus (.ci/run does)")
    result = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    return result.returncode, result.stdout + result.stderr


def load(path: pathlib.Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_scrape_config_is_valid() -> None:
    code, out = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert code == 0, out
    assert "WARNING" not in out, out  # e.g. a file_sd target file that does not exist
    assert f"Checking {RULES}" in out  # the rule_files glob found the rules
    config = load(PROM / "prometheus.yml")
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"sparkwatch-agent", "sparkwatch-coordinator"}
    # The agent's own node label must survive as `node`, not become `exported_node`.
    assert jobs["sparkwatch-agent"]["honor_labels"] is True


def test_example_targets_name_four_spark_nodes() -> None:
    (sd,) = load(PROM / "prometheus.yml")["scrape_configs"][0]["file_sd_configs"]
    (path,) = sd["files"]
    groups = load(PROM / path)
    assert [g["labels"]["node"] for g in groups] == ["spark-1", "spark-2", "spark-3", "spark-4"]
    assert all(g["targets"] == [f"{g['labels']['node']}:9464"] for g in groups)


def test_recording_rules_are_valid_and_follow_the_naming_convention() -> None:
    code, out = promtool("check", "rules", str(RULES))
    assert code == 0 and "WARNING" not in out, out
    rules = [r for g in load(RULES)["groups"] for r in g["rules"]]
    assert rules and all("record" in r for r in rules)  # recording rules only, no alerts
    for rule in rules:
        match = _RULE_NAME.fullmatch(rule["record"])
        assert match, rule["record"]
        level, metric, ops = match.groups()
        if "rate" in ops:  # a rate strips the counter's _total and must be a rate of it
            assert not metric.endswith("_total") and f"rate({metric}_total[" in rule["expr"], rule
        if level == "":  # summed over every node: no label may survive
            assert rule["expr"].startswith("sum(") and " by " not in rule["expr"], rule


def test_gated_rules_sample_at_the_agent_scrape_interval() -> None:
    """The gate averages subquery steps: steps longer than the scrape interval skip samples, shorter
    ones count a sample twice."""
    jobs = {j["job_name"]: j for j in load(PROM / "prometheus.yml")["scrape_configs"]}
    gated = [r["expr"] for g in load(RULES)["groups"] for r in g["rules"] if r["record"].endswith("_gated")]
    assert gated
    for expr in gated:
        assert re.findall(r"\[\d+m:(\w+)\]", expr) == [jobs["sparkwatch-agent"]["scrape_interval"]], expr


def test_rule_unit_tests_pass_and_cover_every_rule() -> None:
    files = sorted((PROM / "tests").glob("*.yml"))
    assert files
    code, out = promtool("test", "rules", *map(str, files))
    assert code == 0, out
    cases = [case for f in files for case in load(f)["tests"]]
    tested = " ".join(t["expr"] for case in cases for t in case.get("promql_expr_test", []))
    untested = [r["record"] for g in load(RULES)["groups"] for r in g["rules"] if r["record"] not in tested]
    assert untested == []
    # every alert is seen both firing and quiet
    fired = {t["alertname"] for case in cases for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for case in cases for t in case.get("alert_rule_test", []) if not t["exp_alerts"]}
    alerts = {r["alert"] for g in load(ALERTS)["groups"] for r in g["rules"]}
    assert alerts and alerts == fired == quiet


def test_alert_rules_are_valid_and_documented() -> None:
    """The alerts docs/operations.md points to: valid, each with a summary, a severity and a wait long
    enough to ride out a restart (the remote-write one counts drops over 10 minutes instead)."""
    code, out = promtool("check", "rules", str(ALERTS))
    assert code == 0 and "WARNING" not in out, out
    rules = [r for g in load(ALERTS)["groups"] for r in g["rules"]]
    assert rules and all("alert" in r for r in rules)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"], rule
        assert "for" in rule or "increase(" in rule["expr"], rule
    assert "sparkwatch.alerts.rules.yml" in (ROOT / "docs" / "operations.md").read_text()


def _compose() -> dict[str, Any]:
    return dict(load(COMPOSE / "compose.yaml"))


def _bind_mounts(service: dict[str, Any]) -> list[tuple[pathlib.Path, str]]:
    """(host path, container path) of a service's bind mounts; named volumes are skipped."""
    mounts = []
    for spec in service.get("volumes", []):
        source, target = spec.split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE / source).resolve(), target))
    return mounts


def test_compose_builds_and_mounts_files_that_exist() -> None:
    compose = _compose()
    assert set(compose["services"]) == {"agent", "prometheus", "grafana"}
    for name, service in compose["services"].items():
        for source, target in _bind_mounts(service):
            assert source.exists(), f"{name}: {source} (mounted at {target}) is missing"
        for spec in service.get("volumes", []):
            if not spec.startswith((".", "/")):
                assert spec.split(":")[0] in compose["volumes"], spec
    build = compose["services"]["agent"]["build"]
    context = (COMPOSE / build["context"]).resolve()
    dockerfile = context / build["dockerfile"]
    assert dockerfile.is_file()
    copies = re.findall(r"^COPY\s+(\S+)\s+\S+$", dockerfile.read_text(), flags=re.M)
    assert copies and all((context / src).exists() for src in copies)
    assert (context / copies[0] / "pyproject.toml").is_file()  # what `pip install` gets is the agent
    command = compose["services"]["agent"]["command"]
    assert command[:3] == ["serve", "--backend", "sim"] and "--insecure-no-auth" in command


def test_compose_prometheus_loads_and_scrapes_the_compose_agent(tmp_path: pathlib.Path) -> None:
    """Rebuild the container's file tree from the mounts and let promtool load it as Prometheus would."""
    compose = _compose()
    prometheus = compose["services"]["prometheus"]
    for source, target in _bind_mounts(prometheus):
        dest = tmp_path / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copy(source, dest)
    (config_flag,) = [a for a in prometheus["command"] if a.startswith("--config.file=")]
    config = tmp_path / config_flag.split("=", 1)[1].lstrip("/")
    code, out = promtool("check", "config", str(config))
    assert code == 0 and "WARNING" not in out, out
    assert re.search(r"SUCCESS: [1-9]\d* rules found", out), out  # the rules are mounted where the glob looks

    jobs = {j["job_name"]: j for j in load(config)["scrape_configs"]}
    (agent_files,) = [sd["files"] for sd in jobs["sparkwatch-agent"]["file_sd_configs"]]
    (group,) = load(config.parent / agent_files[0])
    command = compose["services"]["agent"]["command"]
    port = command[command.index("--listen") + 1].rsplit(":", 1)[1]
    assert group["targets"] == [f"agent:{port}"]
    assert group["labels"]["node"] == command[command.index("--node") + 1]


def test_compose_grafana_finds_its_datasource_and_dashboards() -> None:
    compose = _compose()
    grafana = compose["services"]["grafana"]
    mounts = {target: source for source, target in _bind_mounts(grafana)}
    provider_dir = next(s for t, s in mounts.items() if t.endswith("/provisioning/dashboards"))
    (provider,) = load(provider_dir / "sparkwatch.yml")["providers"]
    assert mounts[provider["options"]["path"]] == ROOT / "grafana" / "dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / "grafana" / "dashboards" / pathlib.PurePosixPath(home).name).is_file()
    assert pathlib.PurePosixPath(home).parent == pathlib.PurePosixPath(provider["options"]["path"])
    datasource_dir = next(s for t, s in mounts.items() if t.endswith("/provisioning/datasources"))
    (ds,) = load(datasource_dir / "prometheus.yml")["datasources"]
    published = [p.rsplit(":", 1)[1] for p in compose["services"]["prometheus"]["ports"]]
    assert ds["url"] in {f"http://prometheus:{port}" for port in published}
