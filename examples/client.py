#!/usr/bin/env python3
"""A cdcview client in Python: list the views or scan one, over TLS and with a bearer token.

    python3 examples/client.py [--addr HOST:PORT] [--tls-ca CA.crt] [--cert C.crt --key C.key]
                               [--token-file TOKEN] [--server-name NAME] views
    python3 examples/client.py ... scan VIEW [--limit N]

The connection flags are the cdcview CLI's:
  --tls-ca FILE       connect with TLS, verifying the server with this CA (PEM)
  --cert/--key FILE   a client certificate and its key (PEM), for a server with
                      server.tls_client_ca_file (mTLS)
  --token-file FILE   send "authorization: Bearer <the file's token>" on every call (needs TLS)
  --server-name NAME  the name expected in the server's certificate, if not --addr's host

In code, that is grpc.ssl_channel_credentials for TLS, grpc.access_token_call_credentials for
the token, joined by grpc.composite_channel_credentials (see channel() below).

Needs grpcio and grpcio-tools: the stubs are generated from proto/ into a temporary directory
at start, removed at exit. One JSON object per line on stdout; errors on stderr, exit status 1 (2 for flags).
"""

import argparse
import importlib
import json
import os
import sys
import tempfile

import grpc

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
PROG = "client.py"


class FlagError(Exception):
    """A flag that is missing its partner or names an unusable file."""


def read_file(flag, path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FlagError(f"{flag} {path}: cannot read it: {e.strerror}") from None


def read_pem(flag, path, what, begin, end):
    data = read_file(flag, path)
    at = data.find(begin.encode())
    if at < 0 or data.find(end.encode(), at) < 0:
        raise FlagError(f'{flag} {path}: not a PEM {what} (no "{begin}...{end}" line)')
    return data


def load_secrets(args):
    """(ca, cert, key, token) from the flags' files; FlagError naming the flag at fault."""
    tls = bool(args.tls_ca or args.cert)
    if args.cert and not args.key:
        raise FlagError("--cert needs --key (the client certificate's private key, PEM)")
    if args.key and not args.cert:
        raise FlagError("--key needs --cert (the client certificate, PEM, that goes with the "
                        "private key)")
    if args.token_file and not tls:
        raise FlagError("--token-file needs TLS: pass --tls-ca FILE (the CA that signed the "
                        "server's certificate); a bearer token sent in clear text is given to "
                        "anyone on the path")
    if args.server_name and not tls:
        raise FlagError("--server-name needs TLS: pass --tls-ca FILE (the CA that signed the "
                        "server's certificate)")
    ca = cert = key = token = None
    if args.tls_ca:
        ca = read_pem("--tls-ca", args.tls_ca, "certificate", "-----BEGIN CERTIFICATE", "-----")
    if args.cert:
        cert = read_pem("--cert", args.cert, "certificate", "-----BEGIN CERTIFICATE", "-----")
        key = read_pem("--key", args.key, "private key", "-----BEGIN ", "PRIVATE KEY-----")
    if args.token_file:
        token = read_file("--token-file", args.token_file).decode("utf-8", "replace").strip()
        if not token:
            raise FlagError(f"--token-file {args.token_file}: the file is empty (it should hold "
                            "the bearer token: the token: of an entry in the server's "
                            "server.tokens_file)")
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
            raise FlagError(f"--token-file {args.token_file}: the token has white space or a "
                            "control character inside; the file should hold the token alone, "
                            "on one line")
    return ca, cert, key, token


def channel(args, ca, cert, key, token):
    if not (args.tls_ca or args.cert):
        return grpc.insecure_channel(args.addr)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                               certificate_chain=cert)
    if token:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    options = [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
    return grpc.secure_channel(args.addr, credentials, options=options)


def hint(code, message, args):
    """The flag that likely fixes a failed call (as the cdcview CLI says it), or ""."""
    text = (message or "").lower()
    tls = bool(args.tls_ca or args.cert)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if not args.token_file:
            return "" if "--token-file" in text else (
                " (the server wants a bearer token: pass --token-file FILE)")
        return f" (the token in --token-file {args.token_file})"
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return f" (the token in --token-file {args.token_file})" if args.token_file else ""
    if code != grpc.StatusCode.UNAVAILABLE:
        return ""
    closed = any(s in text for s in ("socket closed", "connection reset", "end of tcp stream",
                                     "endpoint read failed"))
    if tls and any(s in text for s in ("peer name", "hostname mismatch",
                                       "hostname verification", "not in peer certificate")):
        return (" (the server's certificate does not hold the name in --server-name)"
                if args.server_name else
                " (the server's certificate does not name the host in --addr: pass "
                "--server-name with a name it holds)")
    if tls and ("certificate verify failed" in text or "certificate_verify_failed" in text):
        return (" (TLS handshake failed: pass --tls-ca with the CA that signed the server's "
                "certificate)")
    if tls and "wrong version number" in text:
        return (" (TLS handshake failed: the server does not speak TLS on --addr: drop --tls-ca, "
                "--cert and --key, or check the port)")
    if tls and closed:
        return (" (the server closed the connection: if it requires a client certificate "
                "(server.tls_client_ca_file), pass --cert FILE --key FILE)" if not args.cert else
                " (the server closed the connection: it may not accept the client certificate "
                "in --cert, which must be signed by the CA in its server.tls_client_ca_file)")
    if not tls and closed:
        return (f" (the server closed the connection: if cdcviewd on {args.addr} uses TLS, pass "
                "--tls-ca with the CA that signed its certificate)")
    return f" (is cdcviewd running on {args.addr}?)"


def stubs(out):
    """The generated cdcview.v1 modules (view_service_pb2, view_service_pb2_grpc), generated
    into the directory `out`."""
    from grpc_tools import protoc
    v1 = os.path.join(PROTO_ROOT, "cdcview", "v1")
    files = sorted(os.path.join("cdcview", "v1", f) for f in os.listdir(v1) if f.endswith(".proto"))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    if protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}",
                    f"--grpc_python_out={out}"] + files) != 0:
        sys.exit(f"{PROG}: generating the stubs from {PROTO_ROOT} failed")
    sys.path.insert(0, out)
    return (importlib.import_module("cdcview.v1.view_service_pb2"),
            importlib.import_module("cdcview.v1.view_service_pb2_grpc"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--addr", default="127.0.0.1:50051", help="cdcviewd gRPC host:port")
    parser.add_argument("--tls-ca", help="CA certificate (PEM) that verifies the server; TLS")
    parser.add_argument("--cert", help="client certificate (PEM) for mTLS; needs --key")
    parser.add_argument("--key", help="the client certificate's private key (PEM)")
    parser.add_argument("--token-file", help="file holding the bearer token; needs TLS")
    parser.add_argument("--server-name", help="name expected in the server's certificate")
    parser.add_argument("--timeout", type=float, default=30, help="seconds per call")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("views", help="the views and their item counts")
    scan = commands.add_parser("scan", help="the entries of one view")
    scan.add_argument("view")
    scan.add_argument("--limit", type=int, default=0, help="entries (0: the server's page)")
    args = parser.parse_args(argv)
    try:
        secrets = load_secrets(args)
    except FlagError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cdcview-stubs-") as out:
        return run(args, secrets, *stubs(out))


def run(args, secrets, vs, vs_grpc):
    """The command, with the stubs `vs` and `vs_grpc`; the exit status."""
    from google.protobuf import json_format
    with channel(args, *secrets) as ch:
        stub = vs_grpc.ViewServiceStub(ch)
        try:
            if args.command == "views":
                for v in stub.ListViews(vs.ListViewsRequest(), timeout=args.timeout).views:
                    print(json.dumps({"name": v.name, "table": v.table, "items": v.item_count}))
            else:
                page = stub.Scan(vs.ScanRequest(view=args.view, limit=args.limit),
                                 timeout=args.timeout)
                for entry in page.entries:
                    print(json.dumps(json_format.MessageToDict(entry.item)))
        except grpc.RpcError as e:
            details = e.details() or ""
            print(f"{PROG}: {e.code().name}: {details}{hint(e.code(), details, args)}",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
