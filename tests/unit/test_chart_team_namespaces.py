"""What every team namespace gets from the chart: Pod Security `restricted` on the Namespace
and an ingress NetworkPolicy that lets in only the team's own pods and the release's
(KubeRay's operator), each changeable in the values (kueue.teamNamespaces). That the
cluster enforces both is tests/cluster/test_training.py's example test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import test_chart_render as chart
from test_chart_render import NAMESPACE, Doc, Render, named, of_kind, values_file

pytestmark = pytest.mark.needs_binaries("helm")
# test_chart_render.py's fixtures: the real helm, rendering the minimal profile
helm, render, render_error = chart.helm, chart.render, chart.render_error

LEVEL_LABELS = tuple(f"pod-security.kubernetes.io/{mode}" for mode in ("enforce", "warn", "audit"))
TWO_TEAMS = {
    "kueue": {
        "teams": [
            {"name": "a", "namespace": "team-a", "weight": 1},
            {"name": "b", "namespace": "team-b", "weight": 1},
        ]
    }
}


def _levels(docs: list[Doc], namespace: str) -> dict[str, str]:
    labels = named(docs, "Namespace", namespace)["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")}


def _ingress_from(docs: list[Doc], namespace: str) -> list[Doc]:
    (policy,) = [
        d for d in of_kind(docs, "NetworkPolicy") if d["metadata"]["namespace"] == namespace
    ]
    assert policy["metadata"]["name"] == "gridloop-team-ingress"
    assert policy["spec"]["podSelector"] == {}  # every pod of the team
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress left open
    (rule,) = policy["spec"]["ingress"]
    assert "ports" not in rule
    peers: list[Doc] = rule["from"]
    return peers


def _namespaces(peers: list[Doc]) -> list[str]:
    return [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for p in peers
        if "namespaceSelector" in p
    ]


def test_each_team_namespace_enforces_restricted_pod_security(
    render: Render, tmp_path: Path
) -> None:
    docs = render(values_file(tmp_path, TWO_TEAMS))
    for namespace in ("team-a", "team-b"):
        assert _levels(docs, namespace) == dict.fromkeys(LEVEL_LABELS, "restricted")
    # the sandbox namespaces keep their own level (agentSandbox.podSecurity)
    assert _levels(docs, "agents") == {"pod-security.kubernetes.io/enforce": "baseline"}


def test_the_level_is_a_value(render: Render, tmp_path: Path) -> None:
    docs = render(
        values_file(tmp_path, TWO_TEAMS), sets=("kueue.teamNamespaces.podSecurity=baseline",)
    )
    assert _levels(docs, "team-a") == dict.fromkeys(LEVEL_LABELS, "baseline")


def test_team_pods_take_connections_from_their_team_and_the_release_only(
    render: Render, tmp_path: Path
) -> None:
    docs = render(values_file(tmp_path, TWO_TEAMS))
    for namespace in ("team-a", "team-b"):
        peers = _ingress_from(docs, namespace)
        assert {"podSelector": {}} in peers  # the namespace's own pods, and no other team's
        assert _namespaces(peers) == [NAMESPACE]


def test_more_namespaces_are_a_value_and_the_policy_can_be_turned_off(
    render: Render, tmp_path: Path
) -> None:
    more = {"kueue": {"teamNamespaces": {"networkPolicy": {"allowFromNamespaces": ["monitoring"]}}}}
    docs = render(values_file(tmp_path, TWO_TEAMS), values_file(tmp_path, more, "more.yaml"))
    assert _namespaces(_ingress_from(docs, "team-a")) == [NAMESPACE, "monitoring"]

    off = render(
        values_file(tmp_path, TWO_TEAMS), sets=("kueue.teamNamespaces.networkPolicy.enabled=false",)
    )
    policies = of_kind(off, "NetworkPolicy")
    assert [d for d in policies if d["metadata"]["namespace"] in ("team-a", "team-b")] == []


def test_namespaces_made_elsewhere_still_get_the_policy_but_no_level(
    render: Render, tmp_path: Path
) -> None:
    docs = render(values_file(tmp_path, TWO_TEAMS), sets=("kueue.createNamespaces=false",))
    assert not [d for d in of_kind(docs, "Namespace") if d["metadata"]["name"] == "team-a"]
    assert _namespaces(_ingress_from(docs, "team-a")) == [NAMESPACE]


def test_an_unknown_level_fails_naming_the_field(render_error: Callable[..., str]) -> None:
    error = render_error(sets=("kueue.teamNamespaces.podSecurity=strict",))
    assert "/kueue/teamNamespaces/podSecurity" in error, error
    assert len([line for line in error.splitlines() if "teamNamespaces" in line]) == 1, error


def test_ray_clusters_there_must_want_the_token_unless_turned_off(
    render: Render, tmp_path: Path
) -> None:
    docs = render(values_file(tmp_path, TWO_TEAMS))
    policy = named(docs, "ValidatingAdmissionPolicy", "gridloop-ray-token-auth")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["ray.io"], ["rayjobs", "rayclusters"])
    # bound as the GPU policy is: the teams by name, and any other namespace labelled a team's
    by_name = named(docs, "ValidatingAdmissionPolicyBinding", "gridloop-ray-token-auth")
    (names,) = by_name["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert names == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["team-a", "team-b"],
    }
    labelled = named(docs, "ValidatingAdmissionPolicyBinding", "gridloop-ray-token-auth-labelled")
    selector = labelled["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector[0] == {"key": "gridloop.io/team", "operator": "Exists"}

    off = render(values_file(tmp_path, TWO_TEAMS), sets=("policies.rayTokenAuth=false",))
    assert not [d for d in off if "ray-token-auth" in d["metadata"]["name"]]
