#include "daemon/server/admin_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "daemon/log/log.h"
#include "daemon/server/error_text.h"
#include "daemon/server/grpc_auth.h"
#include "daemon/store/backup.h"

namespace cdcview {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), BoundStatusMessage(s.message()));
}

}  // namespace

AdminService::AdminService(Store* store, std::string backup_dir,
                           std::shared_ptr<security::TokenStore> tokens, MetricsRegistry* metrics)
    : store_(store),
      backup_dir_(std::move(backup_dir)),
      refusals_(tokens != nullptr && metrics != nullptr
                    ? std::make_unique<security::AuthProbe>(metrics->registry(), "grpc")
                    : nullptr),
      permissions_(std::move(tokens), refusals_.get()) {}

grpc::Status AdminService::Backup(grpc::ServerContext* context, const v1::BackupRequest* request,
                                  v1::BackupResponse* response) {
  // A backup copies every view: only a token that may read them all may ask for one.
  if (absl::Status s = permissions_.PermitEverything(*context, "a backup of the store"); !s.ok()) {
    return ToGrpc(s);
  }
  absl::StatusOr<std::filesystem::path> target = ResolveBackupTarget(backup_dir_, request->directory());
  if (!target.ok()) return ToGrpc(target.status());
  if (!backup_mu_.TryLock()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "another backup is running; try again once it has finished");
  }
  LogInfo(absl::StrCat("backup to \"", target->string(), "\" started"));
  absl::StatusOr<BackupResult> result = BackupStore(*store_, *target, absl::Now());
  backup_mu_.Unlock();
  if (!result.ok()) {
    LogError(absl::StrCat("backup to \"", target->string(), "\" failed: ", result.status().message()));
    return ToGrpc(result.status());
  }
  LogInfo(absl::StrCat("backup to \"", result->directory, "\" done: ", result->data_bytes,
                       " bytes"));
  response->set_directory(result->directory);
  response->set_data_bytes(result->data_bytes);
  response->set_manifest(result->manifest);
  return grpc::Status::OK;
}

}  // namespace cdcview
