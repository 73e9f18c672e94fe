// Error text of bounded size: a client's value quoted in an error (QuoteBounded) and a whole
// status message as both gRPC ports send it (BoundStatusMessage). A status message travels in
// the grpc-message header, and headers are capped by both ends (gRPC's client refuses
// metadata over 16 KiB with RESOURCE_EXHAUSTED; nghttp2 will not send a header block over
// 64 KiB, which left a fast-port call unanswered): text a client chose must never make an
// error undeliverable.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace cdcview {

// Bytes of a client's value an error quotes.
inline constexpr size_t kQuotedValueBytes = 64;
// Bytes of a status message the ports send (before grpc-message's percent-encoding, which at
// most triples it: still well within gRPC's 8 KiB soft metadata limit).
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// `value` in double quotes; past kQuotedValueBytes, its first bytes then `..." (N bytes)`.
std::string QuoteBounded(absl::string_view value);
// `message` if it has at most kMaxStatusMessageBytes; otherwise its start and
// "... (message of N bytes cut)", kMaxStatusMessageBytes in all. Never cuts a UTF-8 sequence.
std::string BoundStatusMessage(absl::string_view message);

}  // namespace cdcview
