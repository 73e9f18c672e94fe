#include "index_builders/coding.h"

namespace cdcview {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (size_t i = 0; i < in->size() && i < 10; ++i) {
    const auto byte = static_cast<unsigned char>((*in)[i]);
    // The tenth byte holds only bit 63.
    if (i == 9 && byte > 1) return false;
    result |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
    if ((byte & 0x80) == 0) {
      *v = result;
      in->remove_prefix(i + 1);
      return true;
    }
  }
  return false;
}

void PutLengthPrefixed(std::string_view bytes, std::string* out) {
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

bool GetLengthPrefixed(std::string_view* in, std::string_view* bytes) {
  std::string_view rest = *in;
  uint64_t n = 0;
  if (!GetVarint(&rest, &n) || n > rest.size()) return false;
  *bytes = rest.substr(0, n);
  rest.remove_prefix(n);
  *in = rest;
  return true;
}

namespace {

// FNV-1a with the width's offset basis and prime.
template <typename Hash, Hash kOffsetBasis, Hash kPrime>
Hash Fnv1a(std::string_view bytes) {
  Hash h = kOffsetBasis;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kPrime;
  }
  return h;
}

}  // namespace

uint32_t Fnv1a32(std::string_view bytes) {
  return Fnv1a<uint32_t, 2166136261u, 16777619u>(bytes);
}

uint64_t Fnv1a64(std::string_view bytes) {
  return Fnv1a<uint64_t, 0xcbf29ce484222325ULL, 0x100000001b3ULL>(bytes);
}

}  // namespace cdcview
