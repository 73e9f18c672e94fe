#include "daemon/server/token_seal.h"

#include <cstdint>

namespace cdcview {
namespace {

constexpr size_t kCheckBytes = 4;

uint32_t Fnv1a32(std::string_view data) {
  uint32_t h = 2166136261u;
  for (unsigned char c : data) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

}  // namespace

std::string SealToken(std::string body) {
  const uint32_t check = Fnv1a32(body);
  for (size_t i = 0; i < kCheckBytes; ++i) body.push_back(static_cast<char>(check >> (8 * i)));
  return body;
}

std::optional<std::string_view> UnsealToken(std::string_view token) {
  if (token.size() < kCheckBytes) return std::nullopt;
  std::string_view body = token.substr(0, token.size() - kCheckBytes);
  uint32_t check = 0;
  for (size_t i = 0; i < kCheckBytes; ++i) {
    check |= uint32_t(static_cast<unsigned char>(token[body.size() + i])) << (8 * i);
  }
  if (check != Fnv1a32(body)) return std::nullopt;
  return body;
}

}  // namespace cdcview
