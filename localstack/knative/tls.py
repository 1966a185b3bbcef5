"""The local Knative API's certificate: self-signed for 127.0.0.1, new on every start.

``kubectl`` (client-go) sends a kubeconfig's credentials only over TLS, so the API that
asks for a token must speak HTTPS. ``Certificate.make()`` creates an EC P-256 key and a
certificate for ``127.0.0.1`` valid for a year; the kubeconfig carries the certificate as
its ``certificate-authority-data``, so clients verify the server as they would a cluster.
``files()`` writes both where uvicorn can load them: a private temporary directory that
``remove()`` deletes.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOST = "127.0.0.1"
VALID = datetime.timedelta(days=365)


@dataclass
class Certificate:
    cert_pem: bytes
    key_pem: bytes
    _dir: Path | None = field(default=None, repr=False)

    @classmethod
    def make(cls) -> Certificate:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelfn dev Knative API")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder()
                .subject_name(name).issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + VALID)
                .add_extension(x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]),
                    critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(cert.public_bytes(serialization.Encoding.PEM),
                   key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))

    @property
    def authority_data(self) -> str:
        """The certificate as a kubeconfig's ``certificate-authority-data``."""
        return base64.b64encode(self.cert_pem).decode()

    def files(self) -> tuple[str, str]:
        """Paths of the certificate and the key, in a directory only this user reads."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="modelfn-knative-"))
        cert, key = self._dir / "tls.crt", self._dir / "tls.key"
        for path, data in ((cert, self.cert_pem), (key, self.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        return str(cert), str(key)

    def remove(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
