"""The chart's Kueue queues across a plain Helm install and uninstall.

- Install: Kueue and its queues are created in one `helm install`, before Kueue's
  webhook answers, so Kueue's webhooks for its configuration kinds fail open for the
  chart's own objects (a copy of each webhook, selected by a label) and stay closed for
  everyone else's; the finalizer their defaulting would add is rendered by the chart.
- Uninstall: a pre-delete hook deletes the queues while Kueue still runs, with an RBAC
  role that may get and delete exactly those names.

The bundle is the real one (tests/unit/test_chart_bundled.py); the real helm renders it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_chart_bundled import NOT_BUNDLED, Doc, bundled, helm  # noqa: F401 (fixture)

from gridloop.hooks import queue_removal
from gridloop.hooks.queue_removal import Queue

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "examples" / "fleets" / "default.yaml"
LABEL = "gridloop.io/kueue-webhooks-fail-open"
FINALIZER = "kueue.x-k8s.io/resource-in-use"
HOOK_NAME = "gridloop-queues-pre-delete"

needs_helm = pytest.mark.needs_binaries("helm", "helm3", "kubectl")


def _render(chart: Path, home: Path, *sets: str) -> list[Doc]:
    values = home / "fleet-values.yaml"
    values.write_text(yaml.safe_dump({"fleet": yaml.safe_load(FLEET.read_text())}))
    args = ["template", "gridloop", str(chart), "-n", "gridloop-system", "-f", str(values)]
    done = helm(*args, f"--set={NOT_BUNDLED}", *(f"--set={s}" for s in sets), home=home)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _webhooks(docs: list[Doc]) -> dict[str, Doc]:
    return {
        w["name"]: w
        for d in docs
        if d["kind"].endswith("WebhookConfiguration") and d["metadata"]["name"].startswith("kueue-")
        for w in d["webhooks"]
    }


@needs_helm
def test_kueues_own_kinds_fail_open_only_for_the_charts_objects(
    bundled: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    hooks = _webhooks(_render(bundled, tmp_path))

    for name in ("vclusterqueue", "mclusterqueue", "vresourceflavor", "mresourceflavor", "vcohort"):
        theirs, ours = hooks[f"{name}.kb.io"], hooks[f"{name}.gridloop.kb.io"]
        assert theirs["failurePolicy"] == "Fail", name
        assert theirs["objectSelector"] == {
            "matchExpressions": [{"key": LABEL, "operator": "DoesNotExist"}]
        }
        assert ours["failurePolicy"] == "Ignore", name
        assert ours["objectSelector"] == {
            "matchExpressions": [{"key": LABEL, "operator": "Exists"}]
        }
        assert ours["clientConfig"] == theirs["clientConfig"] and ours["rules"] == theirs["rules"]
    # a workload's admission is never skipped
    assert hooks["vworkload.kb.io"]["failurePolicy"] == "Fail"
    assert "vworkload.gridloop.kb.io" not in hooks


@needs_helm
def test_the_charts_queues_carry_the_label_and_the_finalizer_kueue_would_add(
    bundled: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    docs = _render(bundled, tmp_path)
    kueue = [d for d in docs if d["apiVersion"].startswith("kueue.x-k8s.io/")]
    by_kind = {k: [d for d in kueue if d["kind"] == k] for k in ("ClusterQueue", "ResourceFlavor")}
    # four GPU pools and the container nodes' CPU pool
    assert by_kind["ClusterQueue"] and len(by_kind["ResourceFlavor"]) == 5

    for doc in [*by_kind["ClusterQueue"], *by_kind["ResourceFlavor"]]:
        assert doc["metadata"]["labels"][LABEL] == "true"
        assert doc["metadata"]["finalizers"] == [FINALIZER]
    (cohort,) = [d for d in kueue if d["kind"] == "Cohort"]
    assert cohort["metadata"]["labels"][LABEL] == "true"
    assert "finalizers" not in cohort["metadata"]  # Kueue adds none to a Cohort


@needs_helm
def test_the_pre_delete_hook_may_delete_exactly_the_releases_queues(
    bundled: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    docs = _render(bundled, tmp_path)
    hook = {d["kind"]: d for d in docs if d["metadata"]["name"] == HOOK_NAME}
    assert set(hook) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Pod"}
    for doc in hook.values():
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"

    rules = {r["resources"][0]: r for r in hook["ClusterRole"]["rules"]}
    flavors = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "ResourceFlavor")
    assert sorted(rules["resourceflavors"]["resourceNames"]) == flavors
    assert rules["clusterqueues"]["resourceNames"] == ["default"]
    assert rules["cohorts"]["resourceNames"] == ["gridloop"]
    assert rules["localqueues"]["resourceNames"] == ["default"]
    assert {v for r in rules.values() for v in r["verbs"]} == {"get", "delete"}

    args = hook["Pod"]["spec"]["containers"][0]["command"]
    assert args[:3] == ["gridloop", "hooks", "delete-queues"]
    assert "--localqueue" in args and "team-default/default" in args
    assert args.count("--resourceflavor") == len(flavors)
    assert hook["Pod"]["spec"]["serviceAccountName"] == HOOK_NAME


@needs_helm
def test_no_pre_delete_hook_when_turned_off_or_kueue_is_not_the_charts(
    bundled: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    for sets in (("kueue.queues.deleteBeforeUninstall=false",), ("kueue.enabled=false",)):
        docs = _render(bundled, tmp_path, *sets)
        assert not [d for d in docs if d["metadata"]["name"] == HOOK_NAME], sets


def test_queues_are_deleted_local_queues_first_and_flavors_last() -> None:
    queues = [
        Queue("resourceflavors", "a100"),
        Queue("cohorts", "gridloop"),
        Queue("clusterqueues", "default"),
        Queue("localqueues", "default", "team-default"),
    ]

    ordered = [str(q) for q in queue_removal.in_order(queues)]

    assert ordered == [
        "localqueue team-default/default",
        "clusterqueue default",
        "cohort gridloop",
        "resourceflavor a100",
    ]


@pytest.mark.parametrize("bad", ["default", "/default", "team-default/", "a/b/c"])
def test_a_local_queue_is_namespace_slash_name(bad: str) -> None:
    with pytest.raises(ValueError, match=f"--localqueue {bad}: want NAMESPACE/NAME"):
        queue_removal.parse_local_queue(bad)


@needs_helm
def test_without_the_charts_kueue_no_finalizer_is_rendered(
    bundled: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Only Kueue's controller removes it: with none (or another Kueue, whose own webhook
    adds it), a rendered finalizer would make every deletion of the queues hang."""
    docs = _render(bundled, tmp_path, "kueue.enabled=false")

    queues = [d for d in docs if d["kind"] in ("ClusterQueue", "ResourceFlavor")]
    assert queues
    assert all("finalizers" not in d["metadata"] for d in queues)
