"""examples/client.py, the Python client example: the same connection flags as the cdcview CLI
(--tls-ca, --cert/--key, --token-file) and the same errors, against a daemon serving TLS and
tokens (on its fast read port, ViewService's unary reads)."""

import os
import subprocess
import sys

import yaml

from conftest import REPO, SAMPLE, wait_for
from test_cli_tls import TOKEN

import reference as ref

EXAMPLE = f"{REPO}/examples/client.py"


def client(*args, env=None):
    p = subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True,
                       timeout=60, env=env)
    return p.returncode, p.stdout, p.stderr


def test_flag_errors_name_the_flag(tmp_path):
    cert = tmp_path / "client.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    assert client("--tls-ca", str(cert), "--cert", str(cert), "views") == (
        2, "", "client.py: --cert needs --key (the client certificate's private key, PEM)\n")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    assert client("--token-file", str(token), "views") == (
        2, "", "client.py: --token-file needs TLS: pass --tls-ca FILE (the CA that signed the "
               "server's certificate); a bearer token sent in clear text is given to anyone on "
               "the path\n")
    missing = tmp_path / "missing.crt"
    assert client("--tls-ca", str(missing), "views") == (
        2, "", f"client.py: --tls-ca {missing}: cannot read it: No such file or directory\n")


def test_reads_over_tls_with_a_token_and_names_the_missing_flag(daemon_factory, pki, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [{"name": "py", "token": TOKEN, "views": "all"}]}))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    d = daemon_factory({
        "sources": [{"name": "sample", "table": "App", "file": {"path": SAMPLE}}],
        "tables": [ref.EXAMPLE_TABLE],
        "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0", "fast_reads": "127.0.0.1:0",
                   "tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key,
                   "tokens_file": str(tokens)}}).start(wait_serving=False)
    flags = ("--addr", d.fast_addr, "--tls-ca", pki.ca_cert)
    scan = ("scan", "ByScore", "--limit", "2")
    got = wait_for("the example to read a page over TLS",
                   lambda: (lambda r: r if r[0] == 0 and r[1].count("\n") == 2 else None)(
                       client(*flags, "--token-file", str(token_file), *scan)),
                   describe=lambda: client(*flags, "--token-file", str(token_file), *scan))
    assert TOKEN not in got[1] + got[2]
    assert client(*flags, *scan) == (
        1, "", 'client.py: UNAUTHENTICATED: no bearer token: send the header "authorization: '
               'Bearer <token>" (cdcview --token-file FILE)\n')
    code, out, err = client("--addr", d.fast_addr, "--tls-ca", pki.other_ca_cert,
                            "--token-file", str(token_file), *scan)
    assert code == 1 and err.endswith(
        "(TLS handshake failed: pass --tls-ca with the CA that signed the server's "
        "certificate)\n"), err
    code, out, err = client("--addr", d.fast_addr, *scan)
    assert code == 1 and err.endswith(
        f"(the server closed the connection: if cdcviewd on {d.fast_addr} uses TLS, pass "
        "--tls-ca with the CA that signed its certificate)\n"), err
    # A certificate that does not hold the name asked for.
    code, out, err = client("--addr", d.fast_addr, "--tls-ca", pki.ca_cert, "--server-name",
                            "other.example", "--token-file", str(token_file), *scan)
    assert code == 1 and err.endswith(
        "(the server's certificate does not hold the name in --server-name)\n"), err
    # The generated stubs' directory is removed at exit.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code, out, _ = client(*flags, "--token-file", str(token_file), *scan,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert code == 0 and out.count("\n") == 2
    assert list(tmp.iterdir()) == []
