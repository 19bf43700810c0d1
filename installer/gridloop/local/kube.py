"""A Kubernetes API client for a kubeconfig, sized for concurrent use.

The only place in gridloop.local that builds a client from the `kubernetes`
package; callers get an ApiClient and use the typed APIs on it.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config


def api_client(kubeconfig: Path, pool: int = 32) -> client.ApiClient:
    conf = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=conf)
    conf.connection_pool_maxsize = pool
    conf.retries = 3
    return client.ApiClient(conf)
