#include "daemon/server/cluster_peers.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "daemon/server/view_queries.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cdcview {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* field) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cluster peers: cannot read ", field, " ", path));
  }
  return text.str();
}

// TLS to peers when the server speaks TLS (see the header), else plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentials(
    const ServerConfig& server) {
  if (!server.TlsEnabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!server.tls_client_ca_file.empty()) {
    auto ca = ReadFile(server.tls_client_ca_file, "server.tls_client_ca_file");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  auto cert = ReadFile(server.tls_cert_file, "server.tls_cert_file");
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(server.tls_key_file, "server.tls_key_file");
  if (!key.ok()) return key.status();
  options.pem_cert_chain = *std::move(cert);
  options.pem_private_key = *std::move(key);
  return grpc::SslCredentials(options);
}

}  // namespace

ClusterPeers::ClusterPeers(const ClusterConfig& cluster, const ServerConfig& server,
                           prometheus::Registry* registry)
    : members_(cluster.members), ordinal_(cluster.ordinal), addresses_(cluster.peers) {
  addresses_.resize(members_);
  stubs_.resize(members_);
  seconds_.resize(members_, nullptr);
  if (!server.tokens_file.empty()) {
    const char* token = std::getenv(kClusterTokenEnv);
    if (token != nullptr) token_ = token;
  }
  auto credentials = PeerCredentials(server);
  credentials_status_ = credentials.status();
  grpc::ChannelArguments args;
  // A member back from a restart is reached again within about a second. gRPC also takes the
  // minimum back-off as the time a connection attempt may take, so it is a second, not less:
  // a TLS handshake on a busy member can take longer than 100 ms.
  args.SetInt("grpc.max_reconnect_backoff_ms", 1000);
  args.SetInt("grpc.initial_reconnect_backoff_ms", 100);
  args.SetInt("grpc.min_reconnect_backoff_ms", 1000);
  for (uint32_t i = 0; i < members_; ++i) {
    if (i == ordinal_) continue;
    // Without usable credentials, TLS credentials without a certificate: the handshake fails
    // and every call names the member as not answering, with the reason in the log at start.
    std::shared_ptr<grpc::ChannelCredentials> creds =
        credentials.ok() ? *credentials : grpc::SslCredentials(grpc::SslCredentialsOptions{});
    stubs_[i] = v1::ViewService::NewStub(grpc::CreateCustomChannel(addresses_[i], creds, args));
  }
  if (registry == nullptr) return;
  prometheus::BuildGauge()
      .Name("cdcview_cluster_members")
      .Help("Members of this daemon's cluster (cluster.members).")
      .Register(*registry)
      .Add({})
      .Set(members_);
  auto& seconds = prometheus::BuildHistogram()
                      .Name("cdcview_cluster_fanout_seconds")
                      .Help("Time for one cluster member's part of a merged read, per peer.")
                      .Register(*registry);
  errors_ = &prometheus::BuildCounter()
                 .Name("cdcview_cluster_fanout_errors_total")
                 .Help("A cluster member's part of a merged read that failed, per peer and code.")
                 .Register(*registry);
  for (uint32_t i = 0; i < members_; ++i) {
    if (i == ordinal_) continue;
    seconds_[i] = &seconds.Add({{"peer", absl::StrCat(i)}},
                               prometheus::Histogram::BucketBoundaries{
                                   0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                   0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  }
}

ClusterPeers::~ClusterPeers() = default;

void ClusterPeers::Prepare(grpc::ClientContext* ctx,
                           std::chrono::steady_clock::time_point deadline) const {
  ctx->AddMetadata(kLocalOnlyMetadata, "1");
  if (!token_.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  if (deadline == std::chrono::steady_clock::time_point::max()) return;  // a stream without one
  const auto now = std::chrono::steady_clock::now();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::max(deadline, now) - now));
}

absl::Status ClusterPeers::NotAnswered(uint32_t ordinal, const std::string& why) const {
  return absl::UnavailableError(absl::StrCat(
      "cluster member ", ordinal, " (", addresses_[ordinal], ") did not answer: ", why,
      "; every member is needed for a whole answer: retry when it is back"));
}

absl::Status ClusterPeers::Stopped(uint32_t ordinal) const {
  return absl::UnavailableError(absl::StrCat("cluster member ", ordinal, " (", addresses_[ordinal],
                                             ") was not waited for because ",
                                             ViewQueries::kStopping));
}

absl::Status ClusterPeers::PeerError(uint32_t ordinal, const grpc::Status& s) const {
  if (s.ok()) return absl::OkStatus();
  const bool waited = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                      s.error_message().find(ViewQueries::kNotAppliedInTime) != std::string::npos;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !waited)) {
    return NotAnswered(ordinal, s.error_message());
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void ClusterPeers::Observe(uint32_t ordinal, double seconds, const grpc::Status& s) const {
  if (ordinal >= members_ || seconds_[ordinal] == nullptr) return;
  seconds_[ordinal]->Observe(seconds);
  if (!s.ok()) {
    errors_
        ->Add({{"peer", absl::StrCat(ordinal)},
               {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))}})
        .Increment();
  }
}

}  // namespace cdcview
