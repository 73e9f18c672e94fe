// AuthProbe: the refusals of one port's authentication, by reason.
//
//   cdcview_auth_refused_total{port,reason="no_token|bad_token|view_denied"}   counter: calls
//       refused because they carried no bearer token, a token not in server.tokens_file, or a
//       token that may not read the view (or /metrics) asked for
//
// Every reason exists from the start (a rate has a series before the first refusal). The
// registry merges families of one name, so each port makes its own probe. Thread-safe
// (prometheus-cpp counters are atomic); owned by the server of its port.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace cdcview::security {

class AuthProbe {
 public:
  AuthProbe(prometheus::Registry& registry, const std::string& port);

  // Counts a refusal from TokenStore::Authenticate, PermitView or PermitMetrics by its reason
  // (no_token for kNoTokenMessage, bad_token for another UNAUTHENTICATED, view_denied for
  // PERMISSION_DENIED). OK is not counted.
  void RecordRefusal(const absl::Status& refusal);

 private:
  prometheus::Counter* no_token_;
  prometheus::Counter* bad_token_;
  prometheus::Counter* view_denied_;
};

}  // namespace cdcview::security
