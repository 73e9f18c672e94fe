#include "daemon/config/source_kinds.h"

#include <cstdlib>

namespace cdcview {
namespace {

constexpr SourceKindInfo kSourceKinds[] = {
    {SourceKind::kFile, "file", "file: { path: ... }"},
    {SourceKind::kKafka, "kafka", "kafka: { ... }"},
    {SourceKind::kDynamoDb, "dynamodb", "dynamodb: { ... }"},
};

}  // namespace

std::span<const SourceKindInfo> SourceKinds() { return kSourceKinds; }

std::string_view SourceKindName(SourceKind kind) {
  for (const SourceKindInfo& info : kSourceKinds) {
    if (info.kind == kind) return info.name;
  }
  std::abort();  // a SourceKind without its line in kSourceKinds
}

}  // namespace cdcview
