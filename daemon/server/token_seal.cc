#include "daemon/server/token_seal.h"

#include <cstdint>

#include "index_builders/coding.h"

namespace cdcview {
namespace {

constexpr size_t kCheckBytes = 4;

}  // namespace

std::string SealToken(std::string body) {
  PutLittleEndian32(Fnv1a32(body), &body);
  return body;
}

std::optional<std::string_view> UnsealToken(std::string_view token) {
  if (token.size() < kCheckBytes) return std::nullopt;
  std::string_view body = token.substr(0, token.size() - kCheckBytes);
  if (DecodeLittleEndian32(token.data() + body.size()) != Fnv1a32(body)) return std::nullopt;
  return body;
}

}  // namespace cdcview
