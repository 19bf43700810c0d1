"""Certificates and kubeconfigs for the local control plane.

One cluster CA signs the API server's serving certificate and the client
certificates of each component (admin in `system:masters`, controller-manager
and scheduler under their system identities); a front-proxy CA serves the
aggregation layer (Kueue's visibility API needs it); an RSA key pair signs
service-account tokens; the cluster CA also signs the loopback serving
certificate of Kueue's webhooks and metrics (`<state>/kueue/certs/`). Existing files
are kept, so `down` then `up` does not invalidate kubeconfigs a user has
already exported.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gridloop.local.addons import kueue_manifests

VALIDITY = dt.timedelta(days=365)
SERVICE_IP = "10.96.0.1"  # first address of --service-cluster-ip-range
API_SANS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
# client identity name -> (common name, organisations)
CLIENTS = {
    "admin": ("gridloop-admin", ["system:masters"]),
    "controller-manager": ("system:kube-controller-manager", []),
    "scheduler": ("system:kube-scheduler", []),
    "kwok": ("gridloop-kwok", ["system:masters"]),
    # Kueue's controller as its upstream ServiceAccount, so upstream's RBAC applies to it
    "kueue": (kueue_manifests.USER, list(kueue_manifests.GROUPS)),
    # the API server's identity towards kubelets (logs, exec, port-forward), as kubeadm's
    # apiserver-kubelet-client: the kubelets authorize it through the API server
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ["system:masters"]),
    # the container nodes' kube-proxy, bound to system:node-proxier by the bootstrap RBAC
    "kube-proxy": ("system:kube-proxy", []),
    # NetworkPolicy enforcement, read-only (container/network_policy.py's ClusterRole)
    "kube-network-policies": ("system:kube-network-policies", []),
}
NODE_GROUP = "system:nodes"
CONTEXT = "gridloop-local"

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class Pki:
    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    def kubeconfig(self, client: str) -> Path:
        return self.dir / f"{client}.kubeconfig"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: PrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _load_key(path: Path) -> PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    return key


def _name(cn: str, orgs: list[str] | tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


def _ca(dir: Path, stem: str, cn: str) -> tuple[x509.Certificate, PrivateKey]:
    crt, keyf = dir / f"{stem}.crt", dir / f"{stem}.key"
    if crt.exists() and keyf.exists():
        return x509.load_pem_x509_certificate(crt.read_bytes()), _load_key(keyf)
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + 10 * VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(keyf, key)
    return cert, key


def _signed_by(crt: Path, ca: x509.Certificate) -> bool:
    """False for a leaf left over from an earlier CA: it must be issued again."""
    try:
        x509.load_pem_x509_certificate(crt.read_bytes()).verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(crt: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The DNS names and IP addresses a certificate is for: a leaf whose names changed
    (a newer gridloop serving another name) is issued again."""
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return (), ()
    dns = tuple(sans.get_values_for_type(x509.DNSName))
    ips = tuple(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))
    return dns, ips


def issue(
    dir: Path,
    stem: str,
    ca: tuple[x509.Certificate, PrivateKey],
    cn: str,
    *,
    orgs: list[str] | tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = False,
) -> None:
    """Write `<stem>.crt`/`<stem>.key` signed by `ca`, unless a pair signed by it exists."""
    crt, keyf = dir / f"{stem}.crt", dir / f"{stem}.key"
    if crt.exists() and keyf.exists() and _signed_by(crt, ca[0]) and _names(crt) == (dns, ips):
        return
    key = _key()
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if dns or ips:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca[1], hashes.SHA256())
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(keyf, key)


def ensure_pki(dir: Path, advertise: str | None = None) -> Pki:
    """Create (or keep) every certificate and key the control plane needs; with
    `advertise` (the address pods reach the API server at), the API server's
    certificate names it too."""
    dir.mkdir(parents=True, exist_ok=True)
    ca = _ca(dir, "ca", "gridloop-local-ca")
    issue(
        dir,
        "apiserver",
        ca,
        "kube-apiserver",
        dns=API_SANS,
        ips=("127.0.0.1", SERVICE_IP, *((advertise,) if advertise else ())),
        server=True,
    )
    for client, (cn, orgs) in CLIENTS.items():
        issue(dir, client, ca, cn, orgs=orgs)
    front = _ca(dir, "front-proxy-ca", "gridloop-local-front-proxy-ca")
    issue(dir, "front-proxy-client", front, "front-proxy-client")
    sa = dir / "sa.key"
    if not (sa.exists() and (dir / "sa.pub").exists()):
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(sa, sa_key)
        (dir / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return Pki(dir)


def ensure_loopback_server(pki: Pki, folder: Path, cn: str, dns: tuple[str, ...]) -> Path:
    """`folder/tls.crt` and `tls.key` (the names controller-runtime and Kueue look for),
    for 127.0.0.1, localhost and `dns`, signed by the cluster CA; return `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(pki.dir, "ca", "gridloop-local-ca")
    issue(folder, "tls", ca, cn, dns=("localhost", *dns), ips=("127.0.0.1",), server=True)
    return folder


def ensure_client(pki: Pki, folder: Path, cn: str) -> Path:
    """`folder/client.crt` and `client.key`: a client certificate for `cn`, signed by the
    cluster CA (a server that trusts that CA, such as a Prometheus asking for client
    certificates, takes it); return `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    issue(folder, "client", _ca(pki.dir, "ca", "gridloop-local-ca"), cn)
    return folder


def ensure_node(pki: Pki, folder: Path, node: str, node_ip: str) -> None:
    """A container node's identities, signed by the cluster CA, in `folder`: its kubelet's
    client certificate (`system:node:<node>` in `system:nodes`, what the Node authorizer
    and NodeRestriction know), and the kubelet's serving certificate for its address,
    which the API server checks (--kubelet-certificate-authority) before logs and exec."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(pki.dir, "ca", "gridloop-local-ca")
    issue(folder, "kubelet-client", ca, f"system:node:{node}", orgs=[NODE_GROUP])
    issue(folder, "kubelet-serving", ca, node, dns=(node,), ips=(node_ip,), server=True)


def write_node_kubeconfig(pki: Pki, folder: Path, server: str, path: Path) -> None:
    """The kubelet's kubeconfig: the node's client certificate from `ensure_node`."""
    ca = base64.b64encode(pki.path("ca.crt").read_bytes()).decode()
    crt, key = folder / "kubelet-client.crt", folder / "kubelet-client.key"
    _write_kubeconfig(path, _kubeconfig(ca, server, "kubelet", crt, key))


def _kubeconfig(ca: str, server: str, client: str, crt: Path, key: Path) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": ca}}
        ],
        "users": [
            {
                "name": f"{CONTEXT}-{client}",
                "user": {
                    "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
                    "client-key-data": base64.b64encode(key.read_bytes()).decode(),
                },
            }
        ],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": f"{CONTEXT}-{client}"}}
        ],
        "current-context": CONTEXT,
    }


def _write_kubeconfig(path: Path, doc: dict[str, object]) -> None:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)


def write_kubeconfigs(pki: Pki, server: str) -> None:
    """One kubeconfig per client identity, pointing at `server`, certificates inlined."""
    ca = base64.b64encode(pki.path("ca.crt").read_bytes()).decode()
    for client in CLIENTS:
        crt, key = pki.path(f"{client}.crt"), pki.path(f"{client}.key")
        _write_kubeconfig(pki.kubeconfig(client), _kubeconfig(ca, server, client, crt, key))
