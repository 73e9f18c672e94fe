// What the fuzz targets share: the input as a string_view, a property check that aborts with
// a message (libFuzzer then saves the input as a crash), whether two decoded change events are
// the same, and seed mode: with CDCVIEW_FUZZ_SEEDS=DIR in the environment, a target whose
// inputs our own code produces (tokens, keys, items, serialized events, HTTP/2 requests) writes
// such inputs into DIR from LLVMFuzzerInitialize and exits (tests/fuzz/make_corpus.py).
// Header-only; called from the fuzzing thread only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "index_builders/change_event.h"

namespace cdcview::fuzz {

inline std::string_view Bytes(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A broken property: the message names it, abort() makes libFuzzer keep the input.
inline void Require(bool holds, const char* property) {
  if (holds) return;
  std::fprintf(stderr, "fuzz property broken: %s\n", property);
  std::abort();
}

// Rejections of client or source bytes are INVALID_ARGUMENT (or the given code): any other
// code, e.g. INTERNAL, would tell an operator the daemon is broken.
inline void RequireRejectedAs(const absl::Status& status, absl::StatusCode code,
                              const char* property) {
  if (status.code() == code && !status.message().empty()) return;
  std::fprintf(stderr, "fuzz property broken: %s; got %s\n", property,
               status.ToString().c_str());
  std::abort();
}

inline bool SameEvent(const ChangeEvent& a, const ChangeEvent& b) {
  return a.kind == b.kind && a.keys == b.keys && a.new_image == b.new_image &&
         a.old_image == b.old_image && a.sequence_number == b.sequence_number &&
         a.creation_time_ms == b.creation_time_ms && a.ttl_delete == b.ttl_delete;
}

// The config of the targets that need one (consistency_token, h2_framing): a source of each
// kind on table App, a view and an aggregate.
inline constexpr char kConfigYaml[] = R"(
sources:
  - name: orders
    table: App
    kafka: { brokers: "127.0.0.1:9", topics: [orders], group: g }
  - name: lines
    table: App
    file: { path: unused.ndjson }
  - name: stream
    table: App
    dynamodb: { table_name: App, region: eu-west-1, snapshot: scan, scan_segments: 2 }
tables:
  - name: App
    key: { partition: PK }
    views:
      - name: ByDay
        partition_key: { attribute: day, type: S }
        sort_key: { attribute: PK, type: S }
    aggregates:
      - name: PerDay
        group_by: { attribute: day, type: S }
        measures: [count]
)";

// Seed mode: calls `write(dir)` and exits when CDCVIEW_FUZZ_SEEDS names a directory.
template <typename Write>
void WriteSeedsIfAsked(Write write) {
  const char* dir = std::getenv("CDCVIEW_FUZZ_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  write(std::string(dir));
  std::exit(0);
}

// LLVMFuzzerInitialize of a target that needs no set-up besides seed mode.
#define CDCVIEW_FUZZ_SEED_MODE(write_seeds)            \
  extern "C" int LLVMFuzzerInitialize(int*, char***) { \
    cdcview::fuzz::WriteSeedsIfAsked(write_seeds);     \
    return 0;                                          \
  }

inline void WriteSeed(const std::string& dir, const std::string& name, std::string_view bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  Require(out.good(), "the seed file is written");
}

}  // namespace cdcview::fuzz
