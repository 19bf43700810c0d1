"""The chart's `helm test` hooks and `gridloop selftest`, the checks they run.

The hooks are rendered by the real helm (as in test_chart_render.py) and asserted on as
objects: they are test hooks that keep a failed pod, run the health service's own image,
and the policy test's RBAC is exactly what its dry runs need. The verdicts are pure and
tested table-driven; the health check also runs against the health service's real HTTP
server. The policy check's requests to an API server are exercised by the cluster test
that runs `helm test`, not here: no fake API server.
"""

# The fixtures helm, render and render_error are test_chart_render.py's, imported by name
# (how pytest finds them); each test's parameter of that name then "redefines" them.
# ruff: noqa: F401, F811

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from chart_files import CHART
from test_chart_render import (
    MINIMAL,
    NAMESPACE,
    Doc,
    Render,
    helm,
    named,
    render,
    render_error,
    rule_grants,
    run_helm,
    template_args,
    values_file,
)

from gridloop import cli
from gridloop.chart import objects, rendering
from gridloop.health.metrics import Metrics, serve
from gridloop.selftest import probes, probing, verdicts
from gridloop.selftest.probes import Expect, Probe
from gridloop.selftest.verdicts import ApiAnswer, HttpAnswer

needs_helm = pytest.mark.needs_binaries("helm")

HOOK = "helm.sh/hook"
HEALTH_POD = "gridloop-test-health"
POLICIES = "gridloop-test-policies"  # its Pod, ServiceAccount, Role, RoleBinding and Namespace
SANDBOX_POLICY = "gridloop-sandbox-isolation"
GPU_POLICY = "gridloop-gpu-jobs-queued"


def hooks(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    return {
        (d["kind"], d["metadata"]["name"]): d
        for d in docs
        if HOOK in (d["metadata"].get("annotations") or {})
    }


def flags(container: Doc) -> dict[str, str]:
    """The container's `--flag value` pairs, after `gridloop selftest VERB`."""
    command = container["command"]
    return dict(zip(command[3::2], command[4::2], strict=True))


# --- the hooks, rendered ---


@needs_helm
def test_both_tests_are_test_hooks_that_keep_a_failed_pod(render: Render) -> None:
    found = hooks(render())
    assert set(found) == {
        ("Pod", HEALTH_POD),
        ("Namespace", POLICIES),
        ("ServiceAccount", POLICIES),
        ("Role", POLICIES),
        ("RoleBinding", POLICIES),
        ("Pod", POLICIES),
    }
    for (kind, _), doc in found.items():
        annotations = doc["metadata"]["annotations"]
        assert annotations[HOOK] == "test"
        # deleted when passed and before the next run, never on failure: the pod's logs stay;
        # the scratch namespace only before the next run (Helm would wait for it to go)
        policy = annotations["helm.sh/hook-delete-policy"].split(",")
        if kind == "Namespace":
            assert policy == ["before-hook-creation"]
        else:
            assert sorted(policy) == ["before-hook-creation", "hook-succeeded"]


@needs_helm
def test_the_policy_tests_rbac_is_made_before_its_pod(render: Render) -> None:
    found = hooks(render())

    def weight(kind: str) -> int:
        return int(found[(kind, POLICIES)]["metadata"]["annotations"]["helm.sh/hook-weight"])

    assert weight("Namespace") < weight("Role") < weight("RoleBinding") < weight("Pod")
    assert weight("ServiceAccount") < weight("RoleBinding")


@needs_helm
def test_test_pods_run_the_health_services_image_where_it_runs(
    render: Render, tmp_path: Path
) -> None:
    values = {
        "imageRegistry": "registry.corp:5000/mirror",
        "health": {
            "image": {"repository": "example/gridloop", "tag": "9.9.9", "pullPolicy": "Always"},
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "health", "operator": "Exists"}],
        },
        "systemNodes": {
            "nodeSelector": {"gridloop.io/pool": "system"},
            "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    docs = render(values_file(tmp_path, values))
    service = named(docs, "Deployment", "gridloop-health")["spec"]["template"]["spec"]
    (health,) = service["containers"]
    assert health["image"] == "registry.corp:5000/mirror/example/gridloop:9.9.9"
    for name in (HEALTH_POD, POLICIES):
        pod = named(docs, "Pod", name)["spec"]
        (container,) = pod["containers"]
        assert container["image"] == health["image"], name
        assert container["imagePullPolicy"] == health["imagePullPolicy"] == "Always", name
        assert container["command"][:2] == ["gridloop", "selftest"], name
        assert pod["nodeSelector"] == service["nodeSelector"], name
        assert pod["tolerations"] == service["tolerations"], name
        assert pod["restartPolicy"] == "Never", name


@needs_helm
def test_test_pods_are_locked_down_like_every_gridloop_container(render: Render) -> None:
    docs = render()
    for name in (HEALTH_POD, POLICIES):
        pod = named(docs, "Pod", name)["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532  # the image's user
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][kind])
    # the health test calls no Kubernetes API, so it gets no token
    assert named(docs, "Pod", HEALTH_POD)["spec"]["automountServiceAccountToken"] is False


@needs_helm
def test_the_health_test_asks_the_health_services_own_service(render: Render) -> None:
    docs = render()
    service = named(docs, "Service", "gridloop-health")
    (port,) = service["spec"]["ports"]
    (container,) = named(docs, "Pod", HEALTH_POD)["spec"]["containers"]
    assert container["command"][:3] == ["gridloop", "selftest", "health"]
    url = f"http://gridloop-health.{NAMESPACE}.svc:{port['port']}"
    assert flags(container) == {"--url": url}


@needs_helm
def test_the_policy_tests_rbac_is_create_pods_and_jobs_in_its_own_namespace_only(
    render: Render,
) -> None:
    """(and Ray clusters where KubeRay is: test_chart_bundled.py renders that)"""
    found = hooks(render())
    role = found[("Role", POLICIES)]
    assert role["metadata"]["namespace"] == POLICIES
    assert rule_grants(role["rules"]) == {
        ("", "pods", "create", ""),
        ("batch", "jobs", "create", ""),
    }
    binding = found[("RoleBinding", POLICIES)]
    assert binding["metadata"]["namespace"] == POLICIES
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": POLICIES,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": POLICIES, "namespace": NAMESPACE}
    ]
    assert found[("ServiceAccount", POLICIES)]["metadata"]["namespace"] == NAMESPACE
    assert found[("Pod", POLICIES)]["spec"]["serviceAccountName"] == POLICIES
    assert not {k for k, _ in found} & {"ClusterRole", "ClusterRoleBinding"}


@needs_helm
def test_the_policy_test_probes_the_policies_the_chart_renders_where_they_apply(
    render: Render,
) -> None:
    docs = render()
    sandbox = named(docs, "ValidatingAdmissionPolicy", SANDBOX_POLICY)["spec"]
    gpu = named(docs, "ValidatingAdmissionPolicy", GPU_POLICY)["spec"]
    (container,) = named(docs, "Pod", POLICIES)["spec"]["containers"]
    assert container["command"][:3] == ["gridloop", "selftest", "policies"]
    args = flags(container)
    assert args["--sandbox-policy"] == SANDBOX_POLICY and args["--gpu-policy"] == GPU_POLICY
    assert args["--expect"] == "deny"
    assert args["--image"] == container["image"]
    # the scratch namespace is one both policies match
    labels = named(docs, "Namespace", args["--namespace"])["metadata"]["labels"]
    wanted = sandbox["matchConstraints"]["namespaceSelector"]["matchLabels"]
    assert wanted.items() <= labels.items()
    # (the GPU policy's namespaces are its bindings': the scratch one is labelled a team's)
    assert "namespaceSelector" not in gpu["matchConstraints"]
    labelled = named(docs, "ValidatingAdmissionPolicyBinding", f"{GPU_POLICY}-labelled")
    team, not_a_team = labelled["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert team == {"key": "gridloop.io/team", "operator": "Exists"} and team["key"] in labels
    assert args["--namespace"] not in not_a_team["values"]
    # the compliant pod's RuntimeClass is one the chart makes and the policy allows
    assert named(docs, "RuntimeClass", args["--runtime-class"])
    assert f'"{args["--runtime-class"]}"' in sandbox["validations"][0]["expression"]


@needs_helm
def test_a_binding_that_only_warns_is_tested_for_the_warning(render: Render) -> None:
    docs = render(sets=("policies.validationActions={Warn,Audit}",))
    (container,) = named(docs, "Pod", POLICIES)["spec"]["containers"]
    assert flags(container)["--expect"] == "warn"


@needs_helm
def test_without_the_sandbox_objects_only_the_gpu_policy_is_probed(render: Render) -> None:
    found = hooks(render(sets=("agentSandbox.sandboxes.enabled=false",)))
    (container,) = found[("Pod", POLICIES)]["spec"]["containers"]
    assert "--sandbox-policy" not in flags(container)
    assert ("", "pods", "create", "") not in rule_grants(found[("Role", POLICIES)]["rules"])
    assert "gridloop.io/sandbox" not in found[("Namespace", POLICIES)]["metadata"]["labels"]


@needs_helm
@pytest.mark.parametrize(
    ("sets", "left"),
    [
        (("tests.enabled=false",), set()),
        (("health.enabled=false",), {POLICIES}),
        (("tests.health.enabled=false",), {POLICIES}),
        (("policies.enabled=false",), {HEALTH_POD}),
        (("tests.policies.enabled=false",), {HEALTH_POD}),
        # Audit alone is invisible to a client: nothing to test
        (("policies.validationActions={Audit}",), {HEALTH_POD}),
    ],
    ids=lambda v: ",".join(v) if isinstance(v, tuple) else "",
)
@needs_helm
def test_a_test_is_rendered_only_with_its_feature(
    render: Render, sets: tuple[str, ...], left: set[str]
) -> None:
    assert {name for _, name in hooks(render(sets=sets))} == left


@needs_helm
def test_a_misspelt_tests_key_is_refused(render_error: Callable[..., str]) -> None:
    error = render_error(sets=("tests.helth.enabled=false",))
    assert "tests" in error and "helth" in error


@needs_helm
def test_hooks_stay_out_of_what_gridloop_install_applies(helm: list[str]) -> None:
    """Helm keeps hooks apart from the release's manifest and runs them only on their
    event; `gridloop install` applies the manifest's objects itself before helm runs."""
    result = run_helm(helm, *template_args(CHART, (MINIMAL,), ()))
    assert result.returncode == 0, result.stderr
    rendered = rendering.split(result.stdout, "gridloop")
    assert POLICIES in rendered.text  # `gridloop render` shows them
    applied = objects.parse(rendered.manifest)
    assert [d for d in applied if HOOK in (d["metadata"].get("annotations") or {})] == []
    assert rendered.hooks >= 2  # the two test pods at least, counted apart


# --- probes: pairs that differ in the one field their policy checks ---


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            p for k in sorted(set(a) | set(b)) for p in _diff(a.get(k), b.get(k), f"{path}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            p
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for p in _diff(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [path]


def test_the_sandbox_pods_differ_only_in_their_runtime_class() -> None:
    refused, admitted = probes.sandbox_probes("ns", "p", "gvisor", "img", Expect.DENY)
    assert (refused.expect, admitted.expect) == (Expect.DENY, Expect.ALLOW)
    assert _diff(refused.body, admitted.body) == [".spec.runtimeClassName"]
    assert admitted.body["spec"]["runtimeClassName"] == "gvisor"


def test_the_gpu_jobs_differ_only_in_their_queue_label_and_do_request_a_gpu() -> None:
    refused, admitted = probes.gpu_job_probes("ns", "p", "default", "img", Expect.WARN)
    assert (refused.expect, admitted.expect) == (Expect.WARN, Expect.ALLOW)
    label = f".metadata.labels.{probes.QUEUE_LABEL}"
    assert _diff(refused.body, admitted.body) == [label]
    (container,) = refused.body["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"][probes.GPU] == "1"  # what the policy keys on


def test_the_ray_clusters_differ_only_in_the_token_and_both_name_the_queue() -> None:
    refused, admitted = probes.ray_cluster_probes("ns", "p", "default", "img", Expect.DENY)
    assert (refused.expect, admitted.expect) == (Expect.DENY, Expect.ALLOW)
    assert (refused.kind, refused.body["apiVersion"]) == ("RayCluster", "ray.io/v1")
    assert _diff(refused.body, admitted.body) == [".spec.authOptions"]
    assert admitted.body["spec"]["authOptions"] == {"mode": "token"}
    # the GPU policy wants every Ray cluster in a team namespace queued: both are
    assert refused.body["metadata"]["labels"][probes.QUEUE_LABEL] == "default"


def test_probe_pods_meet_the_restricted_pod_security_level() -> None:
    for probe in [
        *probes.sandbox_probes("ns", "p", "gvisor", "img", Expect.DENY),
        *probes.gpu_job_probes("ns", "p", "q", "img", Expect.DENY),
        *probes.ray_cluster_probes("ns", "p", "q", "img", Expect.DENY),
    ]:
        spec = probe.body["spec"]
        if probe.kind == "Job":
            pod = spec["template"]["spec"]
        elif probe.kind == "RayCluster":
            pod = spec["headGroupSpec"]["template"]["spec"]
        else:
            pod = spec
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert "volumes" not in pod and "hostNetwork" not in pod


# --- verdicts: the health service ---

URL = "http://gridloop-health.gridloop-system.svc:9464"


def test_healthz_passes_on_200_and_fails_with_the_services_words_on_503() -> None:
    assert verdicts.healthz(URL, HttpAnswer(200, "ok\n")).ok
    stuck = verdicts.healthz(URL, HttpAnswer(503, "stuck: no cycle for too long\n"))
    assert not stuck.ok
    assert stuck.line == f"FAIL: {URL} answered 503: stuck: no cycle for too long"


def test_no_answer_fails_naming_the_url_and_why() -> None:
    found = verdicts.healthz(URL, HttpAnswer(0, error="[Errno 111] Connection refused"))
    assert found.line == f"FAIL: no answer from {URL}: [Errno 111] Connection refused"


def test_metrics_pass_only_with_a_sample_of_the_health_services_metric() -> None:
    real = Metrics().expose().decode()
    assert verdicts.metrics(URL, HttpAnswer(200, real)).ok
    # another exporter on the port: 200, but not the health service
    other = verdicts.metrics(URL, HttpAnswer(200, "# HELP up up\nup 1\n"))
    assert not other.ok
    assert "without gridloop_health_leader" in other.line and "not gridloop's" in other.line
    # only a comment naming the metric is not a sample
    comment = f"# HELP {verdicts.HEALTH_METRIC} leads\n# TYPE {verdicts.HEALTH_METRIC} gauge\n"
    assert not verdicts.metrics(URL, HttpAnswer(200, comment)).ok
    assert not verdicts.metrics(URL, HttpAnswer(404, "not found\n")).ok


def test_the_expected_metric_is_one_every_health_service_replica_exports_from_start() -> None:
    assert verdicts.has_sample(Metrics().expose().decode(), verdicts.HEALTH_METRIC)
    assert verdicts.has_sample('m{a="b"} 1\n', "m") and not verdicts.has_sample("mm 1\n", "m")


# --- verdicts: admission ---

MARK = "ValidatingAdmissionPolicy 'gridloop-sandbox-isolation' with binding"
DENIAL = (
    f'pods "gridloop-selftest-x" is forbidden: {MARK} '
    "'gridloop-sandbox-isolation' denied request: pods in sandbox namespaces must set "
    "spec.runtimeClassName to one of gvisor"
)
RBAC = (
    'pods is forbidden: User "system:serviceaccount:gridloop-system:gridloop-test-policies" '
    'cannot create resource "pods" in API group "" in the namespace "gridloop-test-policies"'
)
OTHER_POLICY = (
    "pods \"x\" is forbidden: ValidatingAdmissionPolicy 'someone-elses' with binding "
    "'someone-elses' denied request: no"
)
WARNING = f"299 - \"Validation failed for {MARK} 'gridloop-sandbox-isolation': must set\""


def _probe(expect: Expect) -> Probe:
    return Probe("a pod", "gridloop-sandbox-isolation", expect, "Pod", "ns", {})


@pytest.mark.parametrize(
    ("expect", "answer", "ok", "says"),
    [
        (Expect.DENY, ApiAnswer(403, DENIAL), True, "refused by gridloop-sandbox-isolation"),
        (Expect.DENY, ApiAnswer(422, DENIAL), True, "refused by"),  # reason Invalid
        (Expect.DENY, ApiAnswer(201), False, "is not in force"),
        (Expect.DENY, ApiAnswer(201, warnings=WARNING), False, "only warned"),
        (Expect.DENY, ApiAnswer(403, RBAC), False, "not by gridloop-sandbox-isolation (RBAC"),
        (Expect.DENY, ApiAnswer(403, OTHER_POLICY), False, "not by gridloop-sandbox-isolation"),
        (Expect.DENY, ApiAnswer(0, "connection refused"), False, "no answer"),
        (Expect.WARN, ApiAnswer(201, warnings=WARNING), True, "warning"),
        (Expect.WARN, ApiAnswer(201), False, "without a warning"),
        (Expect.WARN, ApiAnswer(403, DENIAL), False, "should only warn"),
        (Expect.WARN, ApiAnswer(403, RBAC), False, "not by"),
        (Expect.ALLOW, ApiAnswer(201), True, "admitted"),
        (Expect.ALLOW, ApiAnswer(201, warnings=WARNING), False, "which warned"),
        # the compliant object refused: the API server refuses more than the policy
        (Expect.ALLOW, ApiAnswer(403, DENIAL), False, "must be admitted but was refused"),
        (Expect.ALLOW, ApiAnswer(403, RBAC), False, "prove nothing"),
    ],
)
def test_admission_verdicts(expect: Expect, answer: ApiAnswer, ok: bool, says: str) -> None:
    found = verdicts.admission(_probe(expect), answer)
    assert found.ok is ok
    assert says in found.line
    assert found.line.startswith("ok: " if ok else "FAIL: ") and "\n" not in found.line


def test_a_policy_that_does_not_act_yet_is_asked_again_a_refusal_for_another_reason_is_not() -> (
    None
):
    assert verdicts.worth_retrying(_probe(Expect.DENY), ApiAnswer(201))  # just installed
    assert verdicts.worth_retrying(_probe(Expect.ALLOW), ApiAnswer(503, "webhook down"))
    assert verdicts.worth_retrying(_probe(Expect.ALLOW), ApiAnswer(0, "refused"))
    assert not verdicts.worth_retrying(_probe(Expect.DENY), ApiAnswer(403, RBAC))
    assert not verdicts.worth_retrying(_probe(Expect.ALLOW), ApiAnswer(201))
    assert not verdicts.worth_retrying(_probe(Expect.WARN), ApiAnswer(201, warnings=WARNING))


def test_retries_are_bounded() -> None:
    tries: list[int] = []
    slept: list[float] = []
    last = probing.with_retries(lambda: tries.append(1) or len(tries), lambda _: True, slept.append)
    assert last == len(tries) == len(probing.BACKOFFS_S) + 1
    assert sum(slept) == sum(probing.BACKOFFS_S) <= 20


# --- the command ---


@pytest.fixture
def health_service() -> Iterator[str]:
    """The health service's real HTTP server (a fresh Metrics), as its Service would."""
    server = serve(Metrics(), "127.0.0.1", 0, ready=lambda: True, alive=lambda: True)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


@pytest.fixture
def impostor() -> Iterator[str]:
    """Something else that answers 200 on every path."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"# HELP up 1 if up\nup 1\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_selftest_health_passes_against_the_real_health_server(
    health_service: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["selftest", "health", "--url", health_service]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"ok: {health_service}/healthz answered 200: the health service's loop is alive",
        f"ok: {health_service}/metrics answered 200 with gridloop_health_leader",
        "selftest health: all 2 checks passed",
    ]


def test_selftest_health_fails_in_one_line_when_something_else_answers(
    impostor: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["selftest", "health", "--url", impostor]) == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("FAIL")] == [
        f"FAIL: {impostor}/metrics answered 200 but without gridloop_health_leader: what "
        "answers there is not gridloop's health service"
    ]


def test_selftest_policies_with_nothing_to_check_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["selftest", "policies", "--namespace", "ns", "--image", "img"]
    assert cli.main(args) == 2
    assert capsys.readouterr().err.strip() == (
        "error: nothing to check: give --sandbox-policy, --gpu-policy or --ray-policy"
    )


def test_selftest_loads_no_library_of_an_extra() -> None:
    """gridloop's image has the base dependencies only: selftest must run there."""
    probe = (
        "import sys; from gridloop import cli; cli.make_parser('selftest'); "
        "import gridloop.selftest.probing; "
        f"print(' '.join(sorted(m for m in {sorted(cli.EXTRAS)!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
