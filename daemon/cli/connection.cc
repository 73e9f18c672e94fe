#include "daemon/cli/connection.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

absl::StatusOr<std::string> ReadFlagFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": cannot read it: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": cannot read it: ", std::strerror(errno)));
  }
  return text.str();
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path, const char* what,
                                    const char* begin, const char* label_end) {
  absl::StatusOr<std::string> text = ReadFlagFile(flag, path);
  if (!text.ok()) return text;
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN EC PRIVATE KEY-----", ...
  size_t at = text->find(begin);
  if (at == std::string::npos || text->find(label_end, at) == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM ", what,
                                                   " (no \"", begin, "...", label_end,
                                                   "\" line)"));
  }
  return text;
}

}  // namespace

absl::StatusOr<ConnectionSecrets> LoadConnectionSecrets(const ConnectionFlags& flags) {
  if (!flags.cert.empty() && flags.key.empty()) {
    return absl::InvalidArgumentError(
        "--cert needs --key (the client certificate's private key, PEM)");
  }
  if (!flags.key.empty() && flags.cert.empty()) {
    return absl::InvalidArgumentError(
        "--key needs --cert (the client certificate, PEM, that goes with the private key)");
  }
  if (!flags.token_file.empty() && !flags.tls()) {
    return absl::InvalidArgumentError(
        "--token-file needs TLS: pass --tls-ca FILE (the CA that signed the server's "
        "certificate); a bearer token sent in clear text is given to anyone on the path");
  }
  if (!flags.server_name.empty() && !flags.tls()) {
    return absl::InvalidArgumentError(
        "--server-name needs TLS: pass --tls-ca FILE (the CA that signed the server's "
        "certificate)");
  }
  ConnectionSecrets secrets;
  if (!flags.tls_ca.empty()) {
    auto ca = ReadPem("--tls-ca", flags.tls_ca, "certificate", "-----BEGIN CERTIFICATE", "-----");
    if (!ca.ok()) return ca.status();
    secrets.ca_pem = std::move(*ca);
  }
  if (!flags.cert.empty()) {
    auto cert = ReadPem("--cert", flags.cert, "certificate", "-----BEGIN CERTIFICATE", "-----");
    if (!cert.ok()) return cert.status();
    secrets.cert_pem = std::move(*cert);
    auto key = ReadPem("--key", flags.key, "private key", "-----BEGIN ", "PRIVATE KEY-----");
    if (!key.ok()) return key.status();
    secrets.key_pem = std::move(*key);
  }
  if (!flags.token_file.empty()) {
    auto token = ReadFlagFile("--token-file", flags.token_file);
    if (!token.ok()) return token.status();
    secrets.token = std::string(absl::StripAsciiWhitespace(*token));
    if (secrets.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file ", flags.token_file,
                       ": the file is empty (it should hold the bearer token: the token: of "
                       "an entry in the server's server.tokens_file)"));
    }
    for (char c : secrets.token) {
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
        return absl::InvalidArgumentError(
            absl::StrCat("--token-file ", flags.token_file,
                         ": the token has white space or a control character inside; the file "
                         "should hold the token alone, on one line"));
      }
    }
  }
  return secrets;
}

std::shared_ptr<grpc::Channel> OpenChannel(const ConnectionFlags& flags,
                                           const ConnectionSecrets& secrets) {
  if (!flags.tls()) return grpc::CreateChannel(flags.addr, grpc::InsecureChannelCredentials());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = secrets.ca_pem;  // "": the system's CAs
  ssl.pem_cert_chain = secrets.cert_pem;
  ssl.pem_private_key = secrets.key_pem;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (!secrets.token.empty()) {
    credentials = grpc::CompositeChannelCredentials(
        credentials, grpc::AccessTokenCredentials(secrets.token));
  }
  grpc::ChannelArguments args;
  if (!flags.server_name.empty()) args.SetSslTargetNameOverride(flags.server_name);
  return grpc::CreateCustomChannel(flags.addr, credentials, args);
}

std::string ConnectionHint(grpc::StatusCode code, std::string_view message,
                           const ConnectionFlags& flags) {
  const std::string text = absl::AsciiStrToLower(std::string(message));
  auto has = [&text](const char* part) { return absl::StrContains(text, part); };
  if (code == grpc::UNAUTHENTICATED) {
    if (flags.token_file.empty()) {
      return has("--token-file") ? "" : " (the server wants a bearer token: pass --token-file FILE)";
    }
    return absl::StrCat(" (the token in --token-file ", flags.token_file, ")");
  }
  if (code == grpc::PERMISSION_DENIED) {
    return flags.token_file.empty() ? ""
                                    : absl::StrCat(" (the token in --token-file ", flags.token_file, ")");
  }
  if (code != grpc::UNAVAILABLE) return "";
  const bool closed = has("socket closed") || has("connection reset") ||
                      has("end of tcp stream") || has("endpoint closing") ||
                      has("endpoint read failed");
  if (flags.tls()) {
    if (has("peer name") || has("hostname mismatch") || has("not in peer certificate")) {
      return flags.server_name.empty()
                 ? " (the server's certificate does not name the host in --addr: pass "
                   "--server-name with a name it holds)"
                 : " (the server's certificate does not hold the name in --server-name)";
    }
    if (has("certificate verify failed") || has("certificate_verify_failed") ||
        has("self-signed") || has("self signed")) {
      return " (TLS handshake failed: pass --tls-ca with the CA that signed the server's "
             "certificate)";
    }
    if (has("wrong version number") || has("packet length too long")) {
      return " (TLS handshake failed: the server does not speak TLS on --addr: drop --tls-ca, "
             "--cert and --key, or check the port)";
    }
    // With TLS 1.3 the client's handshake ends before the server checks the client's
    // certificate; a refused or missing one shows as a closed connection or an alert.
    if (closed || has("certificate required") || has("handshake failure") || has("bad certificate") ||
        has("unknown ca")) {
      return flags.cert.empty()
                 ? " (the server closed the connection: if it requires a client certificate "
                   "(server.tls_client_ca_file), pass --cert FILE --key FILE)"
                 : " (the server closed the connection: it may not accept the client "
                   "certificate in --cert, which must be signed by the CA in its "
                   "server.tls_client_ca_file)";
    }
    if (has("handshake") || has("ssl")) {
      return " (TLS handshake failed: check --tls-ca, --cert and --key)";
    }
  } else if (closed) {
    return absl::StrCat(" (the server closed the connection: if cdcviewd on ", flags.addr,
                        " uses TLS, pass --tls-ca with the CA that signed its certificate)");
  }
  return absl::StrCat(" (is cdcviewd running on ", flags.addr, "?)");
}

}  // namespace cdcview
