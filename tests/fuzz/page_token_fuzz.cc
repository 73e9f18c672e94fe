// The page and watch-position tokens a client sends back (daemon/server/view_reader.h's
// DecodePageToken and DecodeMergedPageToken, watch.h's DecodeWatchPosition, all on
// token_seal.h's UnsealToken) on arbitrary bytes: the resume key or INVALID_ARGUMENT with a
// message, never an abort or a read past the token. A token a decoder accepts, encoded again
// from what it decoded, decodes to the same (varints may be overlong in the input, so the
// input itself need not come back). And any fields sealed by the encoders decode to
// themselves.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/server/token_seal.h"
#include "daemon/server/view_reader.h"
#include "daemon/server/watch.h"
#include "tests/fuzz/fuzz_support.h"

namespace cdcview {
namespace {

constexpr std::string_view kFingerprint = "fp\x01view-definition";
constexpr std::string_view kView = "by_customer";

const ShardSpec& Shards() {
  static const ShardSpec* shards = new ShardSpec{4, "#{shard}"};
  return *shards;
}

void CheckRejected(const absl::Status& status) {
  fuzz::RequireRejectedAs(status, absl::StatusCode::kInvalidArgument,
                          "a bad token is INVALID_ARGUMENT");
}

void DecodeAsClientBytes(std::string_view token) {
  (void)UnsealToken(token);
  for (bool backward : {false, true}) {
    absl::StatusOr<std::string> last = DecodePageToken(token, kFingerprint, backward);
    if (last.ok()) {
      const std::string again = EncodePageToken(kFingerprint, backward, *last);
      absl::StatusOr<std::string> back = DecodePageToken(again, kFingerprint, backward);
      fuzz::Require(back.ok() && *back == *last, "page token: decode(encode(decode(t)))");
    } else {
      CheckRejected(last.status());
    }
    absl::StatusOr<std::string> rest =
        DecodeMergedPageToken(token, kFingerprint, backward, Shards(), "USER#1");
    if (rest.ok()) {
      const std::string again = EncodeMergedPageToken(kFingerprint, backward, Shards(), "USER#1", *rest);
      absl::StatusOr<std::string> back =
          DecodeMergedPageToken(again, kFingerprint, backward, Shards(), "USER#1");
      fuzz::Require(back.ok() && *back == *rest, "merged token: decode(encode(decode(t)))");
    } else {
      CheckRejected(rest.status());
    }
  }
  absl::StatusOr<uint64_t> sequence = DecodeWatchPosition(token, kView, kFingerprint);
  if (sequence.ok()) {
    const std::string again = EncodeWatchPosition(kView, kFingerprint, *sequence);
    absl::StatusOr<uint64_t> back = DecodeWatchPosition(again, kView, kFingerprint);
    fuzz::Require(back.ok() && *back == *sequence, "watch position: decode(encode(decode(t)))");
  } else {
    CheckRejected(sequence.status());
  }
}

// The input cut in two: fingerprint and resume key, sealed and opened.
void EncodeFields(std::string_view input) {
  const size_t cut = input.size() / 3;
  const std::string_view fingerprint = input.substr(0, cut);
  const std::string_view last = input.substr(cut);
  fuzz::Require(UnsealToken(SealToken(std::string(input))) == input, "unseal(seal(b)) == b");
  if (last.empty()) return;  // no page ends before an empty key
  for (bool backward : {false, true}) {
    absl::StatusOr<std::string> got =
        DecodePageToken(EncodePageToken(fingerprint, backward, last), fingerprint, backward);
    fuzz::Require(got.ok() && *got == last, "decode(encode(fields)) == fields");
    absl::StatusOr<std::string> merged = DecodeMergedPageToken(
        EncodeMergedPageToken(fingerprint, backward, Shards(), fingerprint, last), fingerprint,
        backward, Shards(), fingerprint);
    fuzz::Require(merged.ok() && *merged == last, "merged: decode(encode(fields)) == fields");
  }
}

// Seeds: tokens as the server hands them out.
void WriteSeeds(const std::string& dir) {
  fuzz::WriteSeed(dir, "page", EncodePageToken(kFingerprint, false, std::string("\x03" "D1\0\x03P#1", 8)));
  fuzz::WriteSeed(dir, "page_backward", EncodePageToken(kFingerprint, true, "\x02\x03\x80\x20"));
  fuzz::WriteSeed(dir, "merged", EncodeMergedPageToken(kFingerprint, false, Shards(), "USER#1",
                                                       "\x03P#2\0"));
  fuzz::WriteSeed(dir, "watch", EncodeWatchPosition(kView, kFingerprint, 1234567));
  fuzz::WriteSeed(dir, "sealed_empty", SealToken(""));
}

}  // namespace
}  // namespace cdcview

CDCVIEW_FUZZ_SEED_MODE(cdcview::WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = cdcview::fuzz::Bytes(data, size);
  cdcview::DecodeAsClientBytes(input);
  cdcview::EncodeFields(input);
  return 0;
}
