// Byte coding shared by every stored and wire format of cdcview: LEB128 varints, big- and
// little-endian fixed-width integers, varint-length-prefixed byte strings, and FNV-1a hashes.
// The item codec, the stored-item and change-log formats, aggregate state, view fingerprints
// and the opaque page and position tokens are all built from these, so their bytes depend on
// this file: an encoding here never changes (stored data and issued tokens would stop
// decoding).
//
// Decoders take `std::string_view* in`, return false on truncated or malformed input and
// leave `*in` unchanged then; on success they advance `*in` past what they read. A view they
// return points into the caller's input and lives only as long as it. The Decode*/Encode*
// forms of the fixed-width integers read or write exactly 4 or 8 bytes at a pointer the
// caller has checked. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cdcview {

// ---- Varints: 7 bits per byte, least significant group first, high bit = more follows.

void PutVarint(uint64_t v, std::string* out);
// False if `*in` does not start with a complete varint of at most 10 bytes that fits in 64 bits.
bool GetVarint(std::string_view* in, uint64_t* v);

// ---- Length-prefixed byte strings: varint length, then the bytes.

void PutLengthPrefixed(std::string_view bytes, std::string* out);
// False if the varint is malformed or the length runs past the end of `*in`.
bool GetLengthPrefixed(std::string_view* in, std::string_view* bytes);

// ---- Fixed-width integers. Big-endian where the bytes must sort as the numbers do (LMDB
// keys), or where a wire format says so (gRPC's message length).

inline void EncodeBigEndian32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (24 - 8 * i));
}
inline uint32_t DecodeBigEndian32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}
inline void PutBigEndian32(uint32_t v, std::string* out) {
  char bytes[4];
  EncodeBigEndian32(v, bytes);
  out->append(bytes, sizeof(bytes));
}

inline void PutBigEndian64(uint64_t v, std::string* out) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}
inline uint64_t DecodeBigEndian64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

inline void PutLittleEndian32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
inline uint32_t DecodeLittleEndian32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

// ---- FNV-1a: tiny, well known, and identical in every process and build (unlike std::hash
// or absl::Hash, which are salted or implementation-defined), so its values may be stored.
// A checksum against mistakes, not a MAC and not a hash for untrusted keys in a table.

uint32_t Fnv1a32(std::string_view bytes);
uint64_t Fnv1a64(std::string_view bytes);

}  // namespace cdcview
