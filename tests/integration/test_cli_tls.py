"""The cdcview CLI's TLS and token flags (--tls-ca, --cert, --key, --token-file, --server-name):
the errors that name a missing or unusable flag, without a server; and against a real daemon
serving TLS and tokens, the reads that work with the right flags and the hints, naming the
flag to pass, for the calls refused without them. The token is never printed.

The daemon side is the fast read port (server.fast_reads: ViewService's unary reads, TLS and
tokens as on the main port), which speaks gRPC to the CLI like the main port does.
"""

import json

import pytest
import yaml

from conftest import SAMPLE, run_cli, wait_for

import reference as ref

TOKEN = "cli-token-0123456789abcdef"
NARROW_TOKEN = "narrow-token-0123456789ab"


# ---------------------------------------------------------------- flag errors, no server

def cli_error(*args):
    code, out, err = run_cli(*args, "views", addr="127.0.0.1:1")
    assert (code, out) == (2, ""), err
    return err


def test_flag_errors_name_the_flag_and_what_to_do(tmp_path, binaries):
    cert = tmp_path / "client.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    assert cli_error("--tls-ca", str(cert), "--cert", str(cert)) == (
        "cdcview: --cert needs --key (the client certificate's private key, PEM)\n")
    assert cli_error("--tls-ca", str(cert), "--key", str(cert)) == (
        "cdcview: --key needs --cert (the client certificate, PEM, that goes with the private "
        "key)\n")
    assert cli_error("--token-file", str(token)) == (
        "cdcview: --token-file needs TLS: pass --tls-ca FILE (the CA that signed the server's "
        "certificate); a bearer token sent in clear text is given to anyone on the path\n")
    missing = tmp_path / "nope.crt"
    assert cli_error("--tls-ca", str(missing)) == (
        f"cdcview: --tls-ca {missing}: cannot read it: No such file or directory\n")
    assert cli_error("--tls-ca", str(token)) == (
        f"cdcview: --tls-ca {token}: not a PEM certificate (no \"-----BEGIN CERTIFICATE...-----\" "
        "line)\n")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert cli_error("--tls-ca", str(cert), "--token-file", str(empty)) == (
        f"cdcview: --token-file {empty}: the file is empty (it should hold the bearer token: the "
        "token: of an entry in the server's server.tokens_file)\n")


def test_key_after_get_is_the_items_key_and_the_error_says_so(tmp_path, binaries):
    cert = tmp_path / "client.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    code, out, err = run_cli("--tls-ca", str(cert), "--cert", str(cert), "get", "--table", "App",
                             "--key", "PK=x", addr="127.0.0.1:1")
    assert (code, out, err) == (
        2, "", "cdcview: --cert needs --key (the client certificate's private key, PEM); give it "
               "before the subcommand (after it, --key is the item's key)\n")


# ---------------------------------------------------------------- against a TLS daemon

@pytest.fixture
def secure(daemon_factory, pki, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [
        {"name": "cli", "token": TOKEN, "views": "all"},
        {"name": "narrow", "token": NARROW_TOKEN, "views": ["ByScore"]},
    ]}))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")

    def start(**server):
        config = {"sources": [{"name": "sample", "table": "App", "file": {"path": SAMPLE}}],
                  "tables": [ref.EXAMPLE_TABLE],
                  "server": {"grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                             "fast_reads": "127.0.0.1:0", "tls_cert_file": pki.server_cert,
                             "tls_key_file": pki.server_key, "tokens_file": str(tokens),
                             **server}}
        d = daemon_factory(config, name=f"d{len(server)}").start(wait_serving=False)
        d.token_file = str(token_file)
        return d

    return start


def scan(d, *flags, view="ByScore"):
    return run_cli(*flags, "scan", "--view", view, "--limit", "2", addr=d.fast_addr)


def test_the_right_flags_read_over_tls_with_a_token(secure, pki):
    d = secure()
    flags = ("--tls-ca", pki.ca_cert, "--token-file", d.token_file)
    wait_for("the CLI to read a page over TLS", lambda: scan(d, *flags)[1].count("\n") == 2,
             describe=lambda: scan(d, *flags))
    code, out, err = scan(d, *flags, "--server-name", "localhost")
    assert code == 0 and out.count("\n") == 2, err
    assert TOKEN not in out + err


def test_refusals_name_the_flag_to_pass(secure, pki, tmp_path):
    d = secure()
    code, out, err = scan(d, "--tls-ca", pki.ca_cert)
    assert (code, out, err) == (
        1, "", 'cdcview: UNAUTHENTICATED: no bearer token: send the header "authorization: '
               'Bearer <token>" (cdcview --token-file FILE)\n')
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-0123456789")
    code, out, err = scan(d, "--tls-ca", pki.ca_cert, "--token-file", str(wrong))
    assert (code, out, err) == (
        1, "", "cdcview: UNAUTHENTICATED: the bearer token is not one of server.tokens_file's "
               f"tokens (the token in --token-file {wrong})\n")
    narrow = tmp_path / "narrow"
    narrow.write_text(NARROW_TOKEN)
    code, out, err = scan(d, "--tls-ca", pki.ca_cert, "--token-file", str(narrow), view="GSI1")
    assert (code, out, err) == (
        1, "", 'cdcview: PERMISSION_DENIED: token "narrow" may not read view "GSI1": add the view '
               f"to its views in server.tokens_file (the token in --token-file {narrow})\n")
    assert NARROW_TOKEN not in err


def test_handshake_failures_name_the_tls_flags(secure, pki):
    d = secure()
    code, out, err = scan(d, "--token-file", d.token_file, "--tls-ca", pki.other_ca_cert)
    assert code == 1 and err.endswith(
        "certificate verify failed (TLS handshake failed: pass --tls-ca with the CA that signed "
        "the server's certificate)\n"), err
    code, out, err = scan(d)
    assert code == 1 and err.endswith(
        f"(the server closed the connection: if cdcviewd on {d.fast_addr} uses TLS, pass --tls-ca "
        "with the CA that signed its certificate)\n"), err
    code, out, err = scan(d, "--tls-ca", pki.ca_cert, "--token-file", d.token_file,
                          "--server-name", "other.example")
    assert code == 1 and err.endswith(
        "(the server's certificate does not hold the name in --server-name)\n"), err


def test_mtls_needs_cert_and_key(secure, pki):
    d = secure(tls_client_ca_file=pki.ca_cert)
    flags = ("--tls-ca", pki.ca_cert, "--token-file", d.token_file)
    code, out, err = scan(d, *flags)
    assert code == 1 and err.endswith(
        "(the server closed the connection: if it requires a client certificate "
        "(server.tls_client_ca_file), pass --cert FILE --key FILE)\n"), err
    code, out, err = scan(d, *flags, "--cert", pki.other_client_cert, "--key", pki.other_client_key)
    assert code == 1 and err.endswith(
        "(the server closed the connection: it may not accept the client certificate in --cert, "
        "which must be signed by the CA in its server.tls_client_ca_file)\n"), err
    mutual = (*flags, "--cert", pki.client_cert, "--key", pki.client_key)
    wait_for("the CLI to read a page with a client certificate",
             lambda: scan(d, *mutual)[1].count("\n") == 2, describe=lambda: scan(d, *mutual))


def test_the_main_port_takes_the_same_flags(secure, pki):
    d = secure()
    flags = ("--tls-ca", pki.ca_cert, "--token-file", d.token_file)
    code, out, err = run_cli(*flags, "views", addr=d.addr)
    assert code == 0, err
    assert sorted(json.loads(line)["name"] for line in out.splitlines()) == sorted(
        ref.EXAMPLE_VIEWS)
    code, out, err = run_cli("--tls-ca", pki.ca_cert, "views", addr=d.addr)
    assert (code, out) == (1, "") and err.startswith("cdcview: UNAUTHENTICATED: "), err
    assert "--token-file" in err
    code, out, err = run_cli("views", addr=d.addr)
    assert code == 1 and err.endswith(
        f"(the server closed the connection: if cdcviewd on {d.addr} uses TLS, pass --tls-ca "
        "with the CA that signed its certificate)\n"), err
