"""Kueue's process: its own loopback ports, its command line, and Prometheus scraping it."""

from __future__ import annotations

from pathlib import Path

from gridloop.local import flags, prometheus_config
from gridloop.local.build.recipes import KUEUE_METRICS_CERT_ENV, KUEUE_VISIBILITY_CERT_ENV
from gridloop.local.ports import LOOPBACK, Ports

BASE = 41000  # never bound: these tests only build argv and configs


def test_kueue_listens_on_four_ports_of_its_own() -> None:
    ports = Ports.from_base(BASE)

    mine = {k: v for k, v in ports.by_process().items() if k.startswith("kueue")}
    assert mine == {
        "kueue": BASE + 8,
        "kueue (webhook)": BASE + 9,
        "kueue (metrics)": BASE + 10,
        "kueue (visibility)": BASE + 11,
    }
    others = [v for k, v in ports.by_process().items() if not k.startswith("kueue")]
    assert not set(mine.values()) & set(others)


def test_ports_checked_before_up_include_kueues_only_when_it_runs() -> None:
    ports = Ports.from_base(BASE)

    with_kueue = ports.used_by(["etcd", "kueue"])
    without = ports.used_by(["etcd", "prometheus"])

    assert set(with_kueue) == {
        "etcd",
        "etcd (peer)",
        "kueue",
        "kueue (webhook)",
        "kueue (metrics)",
        "kueue (visibility)",
    }
    assert set(without) == {"etcd", "etcd (peer)", "prometheus"}


def test_kueue_command_line_names_its_config_and_kubeconfig_only() -> None:
    """Every listener, the visibility server's included, is in the config: Kueue v0.18
    removed --visibility-server-port, and the controller refuses it at start-up."""
    argv = flags.kueue(Path("/bin/kueue"), Path("/k"), Path("/c.yaml"))

    assert argv == ["/bin/kueue", "--config=/c.yaml", "--kubeconfig=/k"]


def test_kueue_reads_metrics_and_visibility_certificates_from_the_given_folder() -> None:
    assert flags.kueue_env(Path("/pki/kueue")) == {
        KUEUE_METRICS_CERT_ENV: "/pki/kueue",
        KUEUE_VISIBILITY_CERT_ENV: "/pki/kueue",
    }


def test_prometheus_scrapes_kueue_over_https_with_a_bearer_token_file() -> None:
    ports = Ports.from_base(BASE)

    config = prometheus_config.prometheus_config(
        ports, ["a-0"], Path("/s/token"), Path("/s/ca.crt")
    )

    jobs = {j["job_name"]: j for j in config["scrape_configs"]}  # type: ignore[attr-defined]
    assert set(jobs) == {prometheus_config.EXPORTER_JOB, "kueue"}
    assert jobs["kueue"] == {
        "job_name": "kueue",
        "scheme": "https",
        "authorization": {"credentials_file": "/s/token"},
        "tls_config": {"ca_file": "/s/ca.crt"},
        "static_configs": [{"targets": [f"{LOOPBACK}:{BASE + 10}"]}],
    }


def test_without_kueue_prometheus_scrapes_only_the_exporters() -> None:
    config = prometheus_config.prometheus_config(Ports.from_base(BASE), ["a-0"])

    assert [j["job_name"] for j in config["scrape_configs"]] == [prometheus_config.EXPORTER_JOB]  # type: ignore[attr-defined]
