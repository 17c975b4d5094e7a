"""Alerts, the dashboard and docs/metrics.md against the metrics the code registers."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from provider.attempts.figures import ReservedGpus, TeamSpend, Use
from provider.attempts.metrics import ATTEMPT_LABELS, TEAM_LABELS, Metrics
from provider.controller.request_metrics import PENDING_REASONS, STATES, RequestMetrics
from provider.domain.cloud import CapacityType
from tests.kit.deploy import DEPLOY, ROOT, one, render

MONITORING = DEPLOY / "monitoring"
_REGISTERED = re.compile(r'\b(Counter|Gauge|Histogram|GaugeMetricFamily)\(\s*"(allset_\w+)"')
_SUFFIXES = {"Counter": ("_total",), "Gauge": ("",), "GaugeMetricFamily": ("",),
             "Histogram": ("_bucket", "_sum", "_count")}


def registered() -> dict[str, str]:
    """Metric name -> type, for every metric the code registers (the provider's Metrics and
    the ProvisioningRequest controller's, which registers on the same registry)."""
    found: dict[str, str] = {}
    for path in [*(ROOT / "provider").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        for kind, name in _REGISTERED.findall(path.read_text(encoding="utf-8")):
            found[name] = kind
    return found


def exposed() -> set[str]:
    """Series names Prometheus scrapes."""
    return {name + suffix for name, kind in registered().items() for suffix in _SUFFIXES[kind]}


def documented_name(name: str, kind: str) -> str:
    return name + "_total" if kind == "Counter" else name


def _rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text(encoding="utf-8"))
    rules: list[dict[str, Any]] = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    return rules


def _dashboard_exprs() -> list[str]:
    board = json.loads((MONITORING / "dashboards" / "allset.json").read_text(encoding="utf-8"))
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\ballset_[a-z_]+\b", expr))


def test_the_scan_finds_every_metric_of_the_registry() -> None:
    names = {m.name for m in Metrics().registry.collect()}
    assert names <= set(registered())
    assert "allset_provisioning_requests" in registered()  # the controller's


def test_alerts_and_dashboard_use_only_metrics_that_exist() -> None:
    known = exposed()
    exprs = [r["expr"] for r in _rules()] + _dashboard_exprs()
    used = set().union(*(_metric_names(e) for e in exprs))
    assert used, "no allset metric in the rules or the dashboard?"
    assert used <= known, f"unknown metrics: {sorted(used - known)}"
    # Every metric shows on the dashboard.
    dashboard = set().union(*(_metric_names(e) for e in _dashboard_exprs()))
    assert {n for n in registered()} <= {re.sub(r"_(total|bucket|sum|count)$", "", m)
                                          for m in dashboard}


def test_label_values_in_queries_are_ones_the_code_sets() -> None:
    exprs = [r["expr"] for r in _rules()] + _dashboard_exprs()
    launched = r'allset_nodes_launched_total\{source="([^"]+)"'
    sources = {v for e in exprs for v in re.findall(launched, e)}
    assert sources and sources <= {str(c) for c in CapacityType}
    by_state = r'allset_provisioning_requests\{state="([^"]+)"'
    used = {v for e in exprs for v in re.findall(by_state, e)}
    assert used and used <= set(STATES)
    by_reason = r'allset_pending_requests\{reason="([^"]+)"'
    reasons = {v for e in exprs for v in re.findall(by_reason, e)}
    assert reasons and reasons <= set(PENDING_REASONS)
    gpus = {v for e in exprs for v in re.findall(r'allset_reserved_gpus\{state="([^"]+)"', e)}
    assert gpus == {"paid", "up", "busy"}
    spend = {v for e in exprs
             for v in re.findall(r'allset_spend_usd_per_hour\{source="([^"]+)"', e)}
    assert spend and spend <= {str(CapacityType.ON_DEMAND), str(CapacityType.SPOT)}


def _label_names() -> dict[str, tuple[str, ...]]:
    """Series name -> its labels, for the metrics Metrics and RequestMetrics declare, and
    the fleet's figures computed at each scrape (their labels as a scrape shows them)."""
    metrics = Metrics()
    declared = [*vars(metrics).values(), *vars(RequestMetrics(CollectorRegistry())).values()]
    metrics.collect_fleet(lambda: (
        [ReservedGpus("z", 8, 8, 8)], {("on-demand", "g"): 1.0},
        {("ml", "ml/gpu", CapacityType.RESERVED, Use.IDLE): TeamSpend(1, 1.0)}))
    scraped = {s.name: tuple(s.labels) for f in metrics.registry.collect()
               for s in f.samples if f.name in _FLEET_FAMILIES}
    return {**scraped, **{name + suffix: (*m._labelnames,
                                          *(("le",) if suffix == "_bucket" else ()))
                          for m in declared if isinstance(m, MetricWrapperBase)
                          for name, kind in [(m._name, type(m).__name__)]
                          for suffix in _SUFFIXES[kind]}}


_FLEET_FAMILIES = {"allset_reserved_gpus", "allset_spend_usd_per_hour",
                   "allset_team_spend_usd_per_hour", "allset_team_nodes"}


def test_queries_group_and_filter_by_labels_the_metrics_carry() -> None:
    """Issue 35, item 8: attempts by reason, rollbacks by group, idle nodes reused by group
    and source. A query that sums by a label the code does not set shows one flat line."""
    labels = _label_names()
    assert labels["allset_attempts_total"] == ("outcome", "reason")
    assert labels["allset_rollbacks_total"] == ("group", "zone")
    assert labels["allset_nodes_reused_total"] == ("group", "zone", "source")
    grouped = re.compile(r"\bby \(([^)]*)\) \((?:rate|increase)\((allset_\w+)")
    checked = set()
    for expr in [r["expr"] for r in _rules()] + _dashboard_exprs():
        for by, name in grouped.findall(expr):
            if name in labels:
                wanted = {b.strip() for b in by.split(",")}
                assert wanted <= set(labels[name]), (expr, labels[name])
                checked.add(name)
        for name, matchers in re.findall(r"(allset_\w+)\{([^}]*)\}", expr):
            if name in labels:
                used = set(re.findall(r"(\w+)\s*[=!~]+", matchers))
                assert used <= set(labels[name]), (expr, labels[name])
    assert {"allset_attempts_total", "allset_rollbacks_total",
            "allset_nodes_reused_total"} <= checked
    # Issue 59: the per-team figures, grouped by exactly the labels the code declares.
    assert labels["allset_team_spend_usd_per_hour"] == TEAM_LABELS
    assert labels["allset_team_nodes"] == TEAM_LABELS
    plain = re.compile(r"\bby \(([^)]*)\) \((allset_\w+)")
    team = [(by, name) for e in [r["expr"] for r in _rules()] + _dashboard_exprs()
            for by, name in plain.findall(e) if name.startswith("allset_team_")]
    assert team, "no per-team panel or alert?"
    for by, name in team:
        assert {b.strip() for b in by.split(",")} <= set(labels[name]), (by, name)
    uses = {v for e in _dashboard_exprs() + [r["expr"] for r in _rules()]
            for v in re.findall(r'allset_team_\w+\{use="([^"]+)"', e)}
    assert uses and uses <= {str(u) for u in Use}
    outcomes = {o for e in _dashboard_exprs() + [r["expr"] for r in _rules()]
                for v in re.findall(r'allset_attempts_total\{outcome=~?"([^"]+)"', e)
                for o in v.split("|")}
    assert outcomes and outcomes <= {o for o, _ in ATTEMPT_LABELS}


def test_the_alerts_asked_for_exist() -> None:
    exprs = {r["alert"]: r["expr"] for r in _rules()}
    assert "allset_orphan_instances" in exprs["AllsetOrphanInstances"]
    assert "allset_rollbacks_total" in exprs["AllsetRollbackRateHigh"]
    idle = exprs["AllsetReservationsIdleWhileOnDemandLaunches"]
    assert "allset_reservation_free_slots" in idle and 'source="on-demand"' in idle
    assert 'state="pending"' in exprs["AllsetProvisioningRequestsPending"]
    for rule in _rules():
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule.get("for"), rule["alert"]


def test_docs_describe_every_metric_and_alert() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| `(allset_\w+)` \|", text, flags=re.MULTILINE)
    assert set(table) == {documented_name(n, k) for n, k in registered().items()}
    alerts = set(re.findall(r"^\| `(Allset\w+)` \|", text, flags=re.MULTILINE))
    assert alerts == {r["alert"] for r in _rules()}


def test_service_monitor_scrapes_the_metrics_port() -> None:
    monitor = one(render(MONITORING), "ServiceMonitor", "allset")
    base = render(DEPLOY / "base")
    service = one(base, "Service", "allset-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    # Only the metrics Service: the allset Service routes CA to the leader alone.
    grpc_only = one(base, "Service", "allset")
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= \
        grpc_only["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == \
        [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # The rules' job label is the value of the Service label the monitor names.
    assert 'job="allset"' in next(r["expr"] for r in _rules() if r["alert"] == "AllsetDown")
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "allset"


def test_dashboard_is_a_grafana_dashboard_with_a_datasource_variable() -> None:
    board = json.loads((MONITORING / "dashboards" / "allset.json").read_text(encoding="utf-8"))
    assert board["uid"] == "allset" and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"]
    config_map = one(render(MONITORING), "ConfigMap", "allset-grafana-dashboard")
    assert json.loads(config_map["data"]["allset.json"]) == board


def test_monitoring_files_are_all_in_the_kustomization() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    listed = {*kustomization["resources"],
              *(f for g in kustomization["configMapGenerator"] for f in g["files"])}
    present = {str(p.relative_to(MONITORING)) for p in MONITORING.rglob("*")
               if p.is_file() and p.name != "kustomization.yaml"}
    assert present == listed


def test_the_metrics_page_names_the_service_that_serves_the_metrics() -> None:
    """Issue 35, item 9: docs/metrics.md named the `allset` Service, which has no metrics
    port (it carries CA's gRPC port, to the leader only)."""
    docs = render(DEPLOY / "base")
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    with_metrics = [name for name, svc in services.items()
                    if any(p.get("name") == "metrics" for p in svc["spec"]["ports"])]
    assert with_metrics == ["allset-metrics"]
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    labels = services["allset-metrics"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    intro = (ROOT / "docs" / "metrics.md").read_text().split("\n## ", 1)[0]
    assert "behind the `allset-metrics` Service" in intro
    assert "port 9090 of the `allset` Service" not in intro
