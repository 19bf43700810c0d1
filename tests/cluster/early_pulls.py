"""The heavy images pulled onto the container node early, while the modules before theirs run.

The modules that run the vLLM CPU, Ray and trainer images come late in the container lane
(tests/conftest.py orders them), and the first pod of each waits for its image: the vLLM
CPU image (3.4 GB) took 44 s to pull and unpack on an idle machine, the Ray and trainer
images 6 s each. A background thread pulls them once the first test of the modules that
share one install runs, that install made (`kueue_platform`: they wait on Prometheus and
Kueue more than on the CPU, and come right before the heavy ones; the first modules'
installs keep both cores busy, and started with them the pull made them 48 s longer in
one run; begun with the shared install's setup, that setup took 115 and 136 s in two CI
runs against 38 to 47 s in three others, likely from the two at once) and once the images are in the
registry (under `make test`, when their build beside the lanes ends): that time passes
while a core is idle. The pull is the kubelet's own (the local kubelets pull in parallel:
serializeImagePulls false): a pod per image on the container nodes that runs `true` and
is deleted once done, in a namespace of its own. It is a head start only: a pull that
fails or is cut short by a module restarting the cluster is left to the kubelet, which
pulls the image when a test's pod needs it, as it does for a module run alone; what went
wrong is kept in `said`, not reported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from kubernetes import client
from kubernetes.client.rest import ApiException

NAMESPACE = "gridloop-test-early-pulls"
WAIT_S = 900  # for the pods to finish: a cold run's node is busy


def pod(name: str, image: str) -> dict:
    """A pod that only makes the kubelet pull `image`: it runs `true` on a container node,
    asking for nothing, restricted as Pod Security's `restricted` level wants."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"gridloop.io/container-node": "true"},
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "pull",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["true"],
                    "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


class EarlyPulls:
    """The background thread: `ready()` says when the images are in the registry (False:
    never, give up), then one pod per image, waited for and deleted."""

    def __init__(
        self, api: client.ApiClient, images: Iterable[str], ready: Callable[[], bool]
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.images = list(images)
        self.ready = ready
        self.said: list[str] = []
        # set when the pulls may start (`begin`), and once `ready()` has returned (the
        # images pushed, or never): a module that runs them pushes after that, never beside
        # it, and pulls beside the pods here
        self.go = threading.Event()
        self.pushed = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="early-pulls", daemon=True)

    def start(self) -> EarlyPulls:
        self.thread.start()
        return self

    def begin(self) -> None:
        self.go.set()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self.go.wait(1):
                if self.stopping.is_set():
                    return
            ready = self.ready()
            self.pushed.set()
            if ready:
                self._pull()
        except Exception as err:  # a head start only: the kubelet pulls later anyway
            self.said.append(f"early pulls stopped: {err}")
        finally:
            self.pushed.set()
            self._remove()

    def _pull(self) -> None:
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        names = []
        for i, image in enumerate(self.images):
            self.core.create_namespaced_pod(NAMESPACE, pod(f"pull-{i}", image))
            names.append(f"pull-{i}")
        deadline = time.monotonic() + WAIT_S
        while names and time.monotonic() < deadline and not self.stopping.wait(3):
            for name in list(names):
                try:
                    phase = self.core.read_namespaced_pod(name, NAMESPACE).status.phase
                except ApiException as err:
                    if err.status != 404:
                        raise
                    phase = "gone"
                if phase in ("Succeeded", "Failed", "gone"):
                    self.said.append(f"{name}: {phase}")
                    names.remove(name)

    def _remove(self) -> None:
        try:
            self.core.delete_namespace(NAMESPACE, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                self.said.append(f"early pulls: namespace not deleted: {err.reason}")
        except Exception as err:  # the cluster may be restarting
            self.said.append(f"early pulls: namespace not deleted: {err}")
