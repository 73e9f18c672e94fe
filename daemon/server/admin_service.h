// AdminService: cdcview.v1.AdminService, the operations on the daemon itself, served on the
// main gRPC port beside ViewService (ViewServer registers it). Backup writes an online copy
// of the store into a new directory inside storage.backup_dir (store/backup.h).
//
// Thread-safety: gRPC calls it from its handler threads; one backup runs at a time, a second
// request meanwhile is ABORTED. Ownership: borrows the Store, which must outlive it.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cdcview/v1/admin_service.grpc.pb.h"
#include "daemon/metrics/metrics.h"
#include "daemon/security/auth_probe.h"
#include "daemon/security/token_store.h"
#include "daemon/server/grpc_auth.h"
#include "daemon/store/store.h"

namespace cdcview {

class AdminService final : public v1::AdminService::Service {
 public:
  // `backup_dir` is storage.backup_dir (empty: Backup is refused with FAILED_PRECONDITION).
  // With `tokens`, only a token with views: all may ask for a backup (it copies every view);
  // refusals count in `metrics` (may be null) as the main port's.
  AdminService(Store* store, std::string backup_dir,
               std::shared_ptr<security::TokenStore> tokens = nullptr,
               MetricsRegistry* metrics = nullptr);

  grpc::Status Backup(grpc::ServerContext* context, const v1::BackupRequest* request,
                      v1::BackupResponse* response) override;

 private:
  Store* const store_;
  const std::string backup_dir_;
  std::unique_ptr<security::AuthProbe> refusals_;  // with tokens and metrics
  const CallPermissions permissions_;
  absl::Mutex backup_mu_;  // held for a backup's duration; TryLock refuses a second one
};

}  // namespace cdcview
