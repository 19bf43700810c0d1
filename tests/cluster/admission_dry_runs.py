"""One of the chart's admission policies, applied to the real API server and tried with
server-side dry runs, as a tenant would try it with kubectl.

`policy_in_force` applies the policy and its bindings as `helm template` rendered them,
makes a namespace the policy covers (`covered`) and one it does not (`plain`), both with
Pod Security `privileged` (so Pod Security, which runs first, refuses nothing), and
waits until the policy refuses `probe`: the API server loads a new policy a moment later.
`Admission.removed` takes its bindings away for a while, to show what the policy itself
refuses: the same requests admitted in the same namespace without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.local.build import building

PSA_PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}


@dataclass(frozen=True)
class Admission:
    policy: str  # the ValidatingAdmissionPolicy's name, as refusals print it
    covered: str  # a namespace the policy's bindings select
    plain: str  # a namespace they do not
    kubeconfig: Path
    api: client.ApiClient
    bindings: tuple[dict[str, Any], ...]  # as rendered
    probe: dict[str, Any]  # a request the policy refuses in `covered`

    def in_force(self) -> None:
        """Wait until the policy refuses the probe again."""
        deadline = time.monotonic() + 30
        while self.create(self.covered, self.probe).returncode == 0:
            assert time.monotonic() < deadline, f"{self.policy} was not in force within 30 s"
            time.sleep(0.2)

    @contextmanager
    def removed(self) -> Iterator[None]:
        """The policy's bindings deleted (the policy binds nothing), until the block ends,
        then made again and waited for: inside, the probe is admitted in `covered`."""
        registration = client.AdmissionregistrationV1Api(self.api)
        for binding in self.bindings:
            registration.delete_validating_admission_policy_binding(binding["metadata"]["name"])
        try:
            deadline = time.monotonic() + 30
            while (done := self.create(self.covered, self.probe)).returncode != 0:
                assert time.monotonic() < deadline, f"still refused: {done.stderr}"
                time.sleep(0.2)
            yield
        finally:
            for binding in self.bindings:
                registration.create_validating_admission_policy_binding(binding)
            self.in_force()

    def create(self, namespace: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """`kubectl create --dry-run=server` of `obj` in `namespace`, as a tenant runs it."""
        return subprocess.run(
            [
                str(building.binary("kubectl")),
                *("create", "--dry-run=server", "-n", namespace, "-o", "name", "-f", "-"),
            ],
            input=json.dumps(obj),
            env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def refused(self, obj: dict[str, Any], namespace: str | None = None) -> str:
        """The API server's refusal of `obj` (in the covered namespace), naming the policy."""
        done = self.create(namespace or self.covered, obj)
        assert done.returncode != 0, f"{obj['kind']} admitted: {done.stdout}"
        assert f"ValidatingAdmissionPolicy '{self.policy}'" in done.stderr, done.stderr
        return done.stderr

    def admitted(self, obj: dict[str, Any], namespace: str | None = None) -> None:
        done = self.create(namespace or self.covered, obj)
        assert done.returncode == 0, done.stderr


@contextmanager
def policy_in_force(
    local_cluster,
    docs: list[dict[str, Any]],
    covered: str,
    covered_labels: dict[str, str],
    probe: dict[str, Any],
) -> Iterator[Admission]:
    """`docs`: one ValidatingAdmissionPolicy and its bindings."""
    core = local_cluster.core
    plain = f"plain-{uuid.uuid4().hex[:5]}"
    for name, labels in ((covered, covered_labels), (plain, {})):
        meta = {"name": name, "labels": {"gridloop-test": "true", **PSA_PRIVILEGED, **labels}}
        core.create_namespace({"metadata": meta})
    registration = client.AdmissionregistrationV1Api(local_cluster.api)
    (policy,) = (d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    registration.create_validating_admission_policy(policy)
    for binding in bindings:
        registration.create_validating_admission_policy_binding(binding)
    ready = Admission(
        policy["metadata"]["name"],
        covered,
        plain,
        local_cluster.kubeconfig,
        local_cluster.api,
        tuple(bindings),
        probe,
    )
    try:
        ready.in_force()
        yield ready
    finally:
        for binding in bindings:
            try:
                registration.delete_validating_admission_policy_binding(binding["metadata"]["name"])
            except ApiException as err:
                if err.status != 404:  # a `removed` block cut short
                    raise
        registration.delete_validating_admission_policy(policy["metadata"]["name"])
        for name in (covered, plain):
            core.delete_namespace(name, propagation_policy="Background")
