"""An agent-shaped loop in a gridloop sandbox, through agent-sandbox's own client.

It claims a sandbox from a warm pool (`k8s-agent-sandbox`'s SandboxClient: a SandboxClaim
of the SandboxWarmPool), reads the router token gridloop's issuer writes beside the claim
(the Secret `<claim>-router-token`: a token for this sandbox only), then drives the
sandbox through the router with it. It writes a small
repository with a failing test into it, runs the test (it fails), reads the failing file
back, writes a fix, runs the test again (it passes), and releases the sandbox (the claim
is deleted; the warm pool makes a new one). Every step is printed as one JSON line: what
was done, its exit code, the sizes of its output and how long it took; the last line is
the episode's reward (1.0 when the tests pass at the end).

    pip install k8s-agent-sandbox==1.0.8
    python examples/sandboxes/agent.py --namespace agents --warm-pool default

Without --api-url it reaches the router through `kubectl port-forward` to
`svc/sandbox-router-svc` in the router's namespace (kubectl on PATH, your kubeconfig);
with it, at that URL (for example from a pod:
http://sandbox-router-svc.sandbox-router.svc.cluster.local:8080). The client's own
port-forward mode (SandboxLocalTunnelConnectionConfig) sends no token, so the router
refuses it.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.exceptions import SandboxWarmPoolNotFoundError
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox
from kubernetes import client as kube
from kubernetes import config as kubeconfig
from kubernetes.client.rest import ApiException

# the repository the agent works on: a function with an off-by-one, and its test
CALC = '''def total(values):
    """The sum of every value."""
    result = 0
    for i in range(len(values) - 1):
        result += values[i]
    return result
'''
FIXED = CALC.replace("range(len(values) - 1)", "range(len(values))")
TEST = """import unittest

from calc import total


class TotalTest(unittest.TestCase):
    def test_sums_every_value(self):
        self.assertEqual(total([1, 2, 3]), 6)


if __name__ == "__main__":
    unittest.main()
"""
# the runtime runs a command without a shell and waits for it; `timeout` ends it in the
# sandbox, so a command that hangs cannot hold the sandbox's runtime
TEST_COMMAND = "python3 -m unittest -v test_calc"


def quiet_client_logs() -> None:
    """The client logs to stdout at INFO; keep stdout for the trajectory."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


class Trajectory:
    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.steps: list[dict[str, Any]] = []
        self.out = out

    def record(self, action: str, target: str, call: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        result = call()
        step: dict[str, Any] = {"step": len(self.steps) + 1, "action": action, "target": target}
        if action == "run":
            step |= {
                "exit_code": result.exit_code,
                "stdout_bytes": len(result.stdout.encode()),
                "stderr_bytes": len(result.stderr.encode()),
            }
        elif action == "read":
            step["bytes"] = len(result)
        elif action == "list":
            step["entries"] = sorted(entry.name for entry in result)
        elif action == "exists":
            step["exists"] = bool(result)
        step["seconds"] = round(time.monotonic() - t0, 4)
        self.steps.append(step)
        self.out(json.dumps(step))
        return result


def load_kubeconfig() -> None:
    try:
        kubeconfig.load_incluster_config()
    except kubeconfig.ConfigException:
        kubeconfig.load_kube_config()


class ByName(Sandbox):
    """A sandbox the router finds by its name: the client leaves out X-Sandbox-Pod-IP,
    which the router refuses with a scoped token (the token does not bind an address)."""

    def get_pod_ip(self) -> str | None:
        return None


class TokenClient(SandboxClient):
    sandbox_class = ByName


def read_token(namespace: str, claim: str, timeout: float = 30) -> str:
    """The token gridloop's issuer writes for the claim once it is bound to a sandbox."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            secret = kube.CoreV1Api().read_namespaced_secret(f"{claim}-router-token", namespace)
            return base64.b64decode(secret.data["token"]).decode()
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


@contextmanager
def port_forward(namespace: str) -> Iterator[str]:
    """`kubectl port-forward` to the router's Service on a free local port; its URL."""
    forward = subprocess.Popen(
        ["kubectl", "port-forward", "-n", namespace, "svc/sandbox-router-svc", ":8080"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = forward.stdout.readline() if forward.stdout else ""
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not found:
            said = (forward.stderr.read() if forward.stderr else "").strip()
            raise RuntimeError(f"kubectl port-forward: {said or line.strip() or 'no port'}")
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        forward.terminate()
        forward.wait()


def pools_in(namespace: str) -> str:
    """The warm pools there are in `namespace`, for the line that says a name is not one."""
    found = kube.CustomObjectsApi().list_namespaced_custom_object(
        "extensions.agents.x-k8s.io", "v1beta1", namespace, "sandboxwarmpools"
    )
    names = sorted(item["metadata"]["name"] for item in found.get("items", []))
    return ", ".join(names) if names else "none"


def run_episode(sandbox: Any, trajectory: Trajectory, timeout: int) -> bool:
    """The agent's steps in a claimed sandbox; True when the tests pass at the end."""

    def run(command: str) -> Any:
        return trajectory.record(
            "run",
            command,
            lambda: sandbox.commands.run(f"timeout {timeout} {command}", timeout=timeout + 10),
        )

    trajectory.record("write", "calc.py", lambda: sandbox.files.write("calc.py", CALC))
    trajectory.record("write", "test_calc.py", lambda: sandbox.files.write("test_calc.py", TEST))
    trajectory.record("list", ".", lambda: sandbox.files.list("."))
    first = run(TEST_COMMAND)
    if first.exit_code == 0:
        return True  # nothing to fix
    source = trajectory.record("read", "calc.py", lambda: sandbox.files.read("calc.py")).decode()
    patched = source.replace("range(len(values) - 1)", "range(len(values))")
    trajectory.record("write", "calc.py", lambda: sandbox.files.write("calc.py", patched))
    trajectory.record("exists", "calc.py", lambda: sandbox.files.exists("calc.py"))
    return bool(run(TEST_COMMAND).exit_code == 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="agents", help="a sandbox namespace")
    parser.add_argument("--warm-pool", default="default", help="the SandboxWarmPool to claim from")
    parser.add_argument("--api-url", default=None, help="the router's URL (default: port-forward)")
    parser.add_argument(
        "--router-namespace", default="sandbox-router", help="the router's namespace"
    )
    parser.add_argument("--timeout", type=int, default=30, help="seconds per command")
    args = parser.parse_args(argv)
    quiet_client_logs()
    load_kubeconfig()
    if args.api_url:
        return episode(args, args.api_url)
    with port_forward(args.router_namespace) as url:
        return episode(args, url)


def episode(args: argparse.Namespace, url: str) -> int:
    trajectory = Trajectory()
    t0 = time.monotonic()
    with SandboxClient(SandboxDirectConnectionConfig(api_url=url)) as claimer:
        try:
            claimed_by = claimer.create_sandbox(
                args.warm_pool, namespace=args.namespace, sandbox_ready_timeout=120
            )
        except SandboxWarmPoolNotFoundError:
            there = pools_in(args.namespace)
            print(
                f"agent.py: --warm-pool: no SandboxWarmPool {args.warm_pool!r} in namespace "
                f"{args.namespace} (there: {there})",
                file=sys.stderr,
            )
            return 2
        claim = claimed_by.claim_name
        token = read_token(args.namespace, claim)
        auth = {"Authorization": f"Bearer {token}"}
        with TokenClient(SandboxDirectConnectionConfig(api_url=url, extra_headers=auth)) as client:
            sandbox = client.get_sandbox(claim, namespace=args.namespace)
            claimed = time.monotonic() - t0
            names = {"claim": claim, "pod": sandbox.get_pod_name()}
            try:
                passed = run_episode(sandbox, trajectory, args.timeout)
            finally:
                claimed_by.terminate()  # the claim goes; the pool makes a new sandbox
    summary = {
        "reward": 1.0 if passed else 0.0,
        "passed": passed,
        **names,
        "claim_seconds": round(claimed, 3),
        "seconds": round(time.monotonic() - t0, 3),
        "steps": len(trajectory.steps),
    }
    print(json.dumps(summary))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
