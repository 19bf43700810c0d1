"""The local PKI: one CA signs everything, files are kept across runs, keys stay private."""

from __future__ import annotations

import base64
import ipaddress
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gridloop.local.certs import (
    CLIENTS,
    CONTEXT,
    Pki,
    ensure_node,
    ensure_pki,
    write_kubeconfigs,
    write_node_kubeconfig,
)

SERVER = "https://127.0.0.1:41043"
NODE, NODE_IP = "system-001", "10.200.1.1"


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def organisations(c: x509.Certificate) -> list[str]:
    return [str(a.value) for a in c.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def common_name(c: x509.Certificate) -> str:
    return str(c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


@pytest.fixture(scope="module")
def pki_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PKI for the read-only tests: generating keys is the slow part."""
    directory = tmp_path_factory.mktemp("pki")
    write_kubeconfigs(ensure_pki(directory), SERVER)
    return directory


def test_ca_is_a_self_signed_ca(pki_dir: Path) -> None:
    ca = cert(pki_dir / "ca.crt")

    assert ca.issuer == ca.subject
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    ca.verify_directly_issued_by(ca)


def test_apiserver_serves_loopback_and_the_in_cluster_names(pki_dir: Path) -> None:
    apiserver = cert(pki_dir / "apiserver.crt")

    sans = apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert {"kubernetes.default.svc", "localhost"} <= set(sans.get_values_for_type(x509.DNSName))
    usage = apiserver.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    apiserver.verify_directly_issued_by(cert(pki_dir / "ca.crt"))


def test_admin_is_in_system_masters_and_signed_by_the_ca(pki_dir: Path) -> None:
    admin, ca = cert(pki_dir / "admin.crt"), cert(pki_dir / "ca.crt")

    assert organisations(admin) == ["system:masters"]
    assert admin.issuer == ca.subject
    admin.verify_directly_issued_by(ca)


@pytest.mark.parametrize(("client", "identity"), CLIENTS.items(), ids=list(CLIENTS))
def test_client_certificates_carry_their_identity_for_client_auth(
    pki_dir: Path, client: str, identity: tuple[str, list[str]]
) -> None:
    c = cert(pki_dir / f"{client}.crt")

    assert (common_name(c), organisations(c)) == identity
    usage = c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    c.verify_directly_issued_by(cert(pki_dir / "ca.crt"))


def test_front_proxy_client_is_signed_by_the_front_proxy_ca_only(pki_dir: Path) -> None:
    client = cert(pki_dir / "front-proxy-client.crt")

    assert common_name(client) == "front-proxy-client"
    client.verify_directly_issued_by(cert(pki_dir / "front-proxy-ca.crt"))
    with pytest.raises(ValueError):
        client.verify_directly_issued_by(cert(pki_dir / "ca.crt"))


def test_service_account_key_pair_matches(pki_dir: Path) -> None:
    private = serialization.load_pem_private_key((pki_dir / "sa.key").read_bytes(), None)
    public = serialization.load_pem_public_key((pki_dir / "sa.pub").read_bytes())

    assert isinstance(private, rsa.RSAPrivateKey)
    assert isinstance(public, rsa.RSAPublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()


def test_every_private_key_and_kubeconfig_is_owner_only(pki_dir: Path) -> None:
    keys = ["ca", "apiserver", *CLIENTS, "front-proxy-ca", "front-proxy-client", "sa"]
    secrets = [f"{k}.key" for k in keys] + [f"{c}.kubeconfig" for c in CLIENTS]

    assert sorted(p.name for p in pki_dir.glob("*.key")) == sorted(f"{k}.key" for k in keys)
    assert {name: stat.S_IMODE((pki_dir / name).stat().st_mode) for name in secrets} == {
        name: 0o600 for name in secrets
    }


def test_second_ensure_pki_keeps_every_file(tmp_path: Path) -> None:
    ensure_pki(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    ensure_pki(tmp_path)

    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("client", list(CLIENTS))
def test_kubeconfig_points_at_the_server_and_trusts_the_ca(pki_dir: Path, client: str) -> None:
    doc = yaml.safe_load((pki_dir / f"{client}.kubeconfig").read_text())

    (cluster,) = doc["clusters"]
    assert cluster["cluster"]["server"] == SERVER
    ca_data = base64.b64decode(cluster["cluster"]["certificate-authority-data"])
    assert ca_data == (pki_dir / "ca.crt").read_bytes()
    assert doc["current-context"] == CONTEXT


@pytest.mark.parametrize("client", list(CLIENTS))
def test_kubeconfig_embeds_the_clients_own_certificate_and_key(pki_dir: Path, client: str) -> None:
    doc = yaml.safe_load((pki_dir / f"{client}.kubeconfig").read_text())

    (user,) = doc["users"]
    assert (
        base64.b64decode(user["user"]["client-certificate-data"])
        == (pki_dir / f"{client}.crt").read_bytes()
    )
    assert (
        base64.b64decode(user["user"]["client-key-data"])
        == (pki_dir / f"{client}.key").read_bytes()
    )


def test_kubeconfig_follows_a_new_server_address(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    write_kubeconfigs(pki, "https://127.0.0.1:1111")

    write_kubeconfigs(pki, "https://127.0.0.1:2222")

    doc = yaml.safe_load(pki.kubeconfig("admin").read_text())
    assert doc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:2222"


# --- container nodes: each kubelet's client and serving certificates ---


@pytest.fixture(scope="module")
def node_dir(pki_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("node") / "pki"
    ensure_node(Pki(pki_dir), folder, NODE, NODE_IP)
    write_node_kubeconfig(Pki(pki_dir), folder, SERVER, folder / "kubelet.kubeconfig")
    return folder


def test_a_kubelet_authenticates_as_its_node_in_system_nodes(pki_dir: Path, node_dir: Path) -> None:
    client = cert(node_dir / "kubelet-client.crt")

    # what the Node authorizer and NodeRestriction take a kubelet to be
    assert common_name(client) == "system:node:system-001"
    assert organisations(client) == ["system:nodes"]
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    client.verify_directly_issued_by(cert(pki_dir / "ca.crt"))


def test_a_kubelet_serves_its_node_name_and_address(pki_dir: Path, node_dir: Path) -> None:
    serving = cert(node_dir / "kubelet-serving.crt")

    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(NODE_IP)]
    assert sans.get_values_for_type(x509.DNSName) == [NODE]
    usage = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    serving.verify_directly_issued_by(cert(pki_dir / "ca.crt"))


def test_a_nodes_keys_and_kubeconfig_are_owner_only(node_dir: Path) -> None:
    secrets = ["kubelet-client.key", "kubelet-serving.key", "kubelet.kubeconfig"]

    assert {n: stat.S_IMODE((node_dir / n).stat().st_mode) for n in secrets} == {
        n: 0o600 for n in secrets
    }


def test_the_kubelets_kubeconfig_carries_its_node_identity_and_trusts_the_ca(
    pki_dir: Path, node_dir: Path
) -> None:
    doc = yaml.safe_load((node_dir / "kubelet.kubeconfig").read_text())

    ((cluster,), (user,)) = doc["clusters"], doc["users"]
    assert cluster["cluster"]["server"] == SERVER
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == (
        (pki_dir / "ca.crt").read_bytes()
    )
    assert base64.b64decode(user["user"]["client-certificate-data"]) == (
        (node_dir / "kubelet-client.crt").read_bytes()
    )
    assert base64.b64decode(user["user"]["client-key-data"]) == (
        (node_dir / "kubelet-client.key").read_bytes()
    )
    assert doc["current-context"] == CONTEXT


def test_a_second_ensure_node_keeps_its_certificates(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    ensure_node(pki, tmp_path / "node", NODE, NODE_IP)
    before = {p.name: p.read_bytes() for p in (tmp_path / "node").iterdir()}

    ensure_node(pki, tmp_path / "node", NODE, NODE_IP)

    assert {p.name: p.read_bytes() for p in (tmp_path / "node").iterdir()} == before


def test_a_node_with_a_new_address_gets_a_new_serving_certificate_only(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    ensure_node(pki, tmp_path / "node", NODE, NODE_IP)
    client = (tmp_path / "node" / "kubelet-client.crt").read_bytes()

    ensure_node(pki, tmp_path / "node", NODE, "10.201.1.1")

    serving = cert(tmp_path / "node" / "kubelet-serving.crt")
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.201.1.1")]
    assert (tmp_path / "node" / "kubelet-client.crt").read_bytes() == client
