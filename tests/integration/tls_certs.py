"""A throwaway PKI for the TLS tests, made with the `openssl` command.

make_pki(directory) writes, as PEM files in `directory`:
- a CA (`ca_cert`) that signs two server pairs and a client pair:
  `server_cert`/`server_key` (serial 0x1001) and `server2_cert`/`server2_key` (serial 0x1002),
  both with SANs DNS:localhost and IP:127.0.0.1, for rotation tests;
  `client_cert`/`client_key` (CN=cdcview-test-client, clientAuth);
- an unrelated CA (`other_ca_cert`) and a client pair it signed (`other_client_cert`,
  `other_client_key`): what a server that trusts only `ca_cert` must refuse.
Keys are P-256 (fast to make). Certificates are valid for a day, server2 for two (so that a
rotation shows in the expiry metric).
"""

import dataclasses
import os
import subprocess

SERVER_SERIAL = 0x1001
SERVER2_SERIAL = 0x1002
CLIENT_SERIAL = 0x2001
CLIENT_CN = "cdcview-test-client"


@dataclasses.dataclass(frozen=True)
class Pki:
    ca_cert: str
    server_cert: str
    server_key: str
    server2_cert: str
    server2_key: str
    client_cert: str
    client_key: str
    other_ca_cert: str
    other_client_cert: str
    other_client_key: str

    def read(self, field):
        """The bytes of one of the files (grpc.ssl_*_credentials take bytes)."""
        with open(getattr(self, field), "rb") as f:
            return f.read()


def _openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({p.returncode}): {p.stderr}")


def _key(name, cwd):
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", name, cwd=cwd)


def _ca(prefix, cn, cwd):
    _key(f"{prefix}.key", cwd)
    _openssl("req", "-x509", "-new", "-key", f"{prefix}.key", "-sha256", "-days", "1",
             "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", f"{prefix}.crt", cwd=cwd)


def _leaf(prefix, cn, serial, ca, extensions, cwd, days=1):
    _key(f"{prefix}.key", cwd)
    _openssl("req", "-new", "-key", f"{prefix}.key", "-subj", f"/CN={cn}", "-out",
             f"{prefix}.csr", cwd=cwd)
    ext = f"{prefix}.ext"
    with open(os.path.join(cwd, ext), "w", encoding="ascii") as f:
        f.write("basicConstraints=CA:FALSE\n" + extensions)
    _openssl("x509", "-req", "-in", f"{prefix}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-set_serial", str(serial), "-days", str(days), "-sha256", "-extfile", ext,
             "-out", f"{prefix}.crt", cwd=cwd)
    os.remove(os.path.join(cwd, f"{prefix}.csr"))
    os.remove(os.path.join(cwd, ext))


SERVER_EXT = ("keyUsage=critical,digitalSignature,keyEncipherment\n"
              "extendedKeyUsage=serverAuth\n"
              "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
CLIENT_EXT = ("keyUsage=critical,digitalSignature,keyEncipherment\n"
              "extendedKeyUsage=clientAuth\n")


def make_pki(directory):
    """Writes the PKI described above into `directory` (created if missing); returns its paths."""
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    _ca("ca", "cdcview-test-ca", directory)
    _leaf("server", "localhost", SERVER_SERIAL, "ca", SERVER_EXT, directory)
    _leaf("server2", "localhost", SERVER2_SERIAL, "ca", SERVER_EXT, directory, days=2)
    _leaf("client", CLIENT_CN, CLIENT_SERIAL, "ca", CLIENT_EXT, directory)
    _ca("other-ca", "cdcview-test-other-ca", directory)
    _leaf("other-client", CLIENT_CN, CLIENT_SERIAL, "other-ca", CLIENT_EXT, directory)
    path = lambda name: os.path.join(directory, name)  # noqa: E731
    return Pki(ca_cert=path("ca.crt"), server_cert=path("server.crt"),
               server_key=path("server.key"), server2_cert=path("server2.crt"),
               server2_key=path("server2.key"), client_cert=path("client.crt"),
               client_key=path("client.key"), other_ca_cert=path("other-ca.crt"),
               other_client_cert=path("other-client.crt"),
               other_client_key=path("other-client.key"))


def serial_of(pem_bytes):
    """The serial number of a PEM certificate (e.g. the one a server presented)."""
    p = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem_bytes,
                       capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"openssl x509 -serial failed: {p.stderr.decode()}")
    return int(p.stdout.decode().strip().split("=", 1)[1], 16)
