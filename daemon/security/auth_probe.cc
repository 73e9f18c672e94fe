#include "daemon/security/auth_probe.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "daemon/security/token_store.h"

namespace cdcview::security {

AuthProbe::AuthProbe(prometheus::Registry& registry, const std::string& port) {
  auto& refused = prometheus::BuildCounter()
                      .Name("cdcview_auth_refused_total")
                      .Help("Calls refused by authentication: no bearer token, a token not in "
                            "server.tokens_file, or a token that may not read the view asked for.")
                      .Register(registry);
  no_token_ = &refused.Add({{"port", port}, {"reason", "no_token"}});
  bad_token_ = &refused.Add({{"port", port}, {"reason", "bad_token"}});
  view_denied_ = &refused.Add({{"port", port}, {"reason", "view_denied"}});
}

void AuthProbe::RecordRefusal(const absl::Status& refusal) {
  if (refusal.code() == absl::StatusCode::kPermissionDenied) {
    view_denied_->Increment();
  } else if (refusal.code() == absl::StatusCode::kUnauthenticated) {
    (refusal.message() == kNoTokenMessage ? no_token_ : bad_token_)->Increment();
  }
}

}  // namespace cdcview::security
