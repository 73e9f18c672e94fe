// VerifySigV4 against signatures botocore made (fixed vectors: botocore's SigV4Auth for service
// dynamodb, credentials reader / reader-secret-0123456, pasted below), and each refusal with
// DynamoDB's exact type and message. The primitives (HMAC, the derived key, encoding) are
// checked against AWS's published test suite in tests/daemon/aws/sigv4_test.cc.
#include "daemon/dynamodb/sigv4_verify.h"

#include <fstream>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview::dynamodb {
namespace {

constexpr char kBody[] = R"({"TableName": "App", "Key": {"PK": {"S": "I1"}}})";
constexpr char kDate[] = "20261202T142419Z";
constexpr char kGetItemAuthorization[] =
    "AWS4-HMAC-SHA256 Credential=reader/20261202/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, "
    "Signature=017707255a71be43fcd32683a711ee4d43c0fe590bfe475c6a549be8d0a2246e";
constexpr char kQueryAuthorization[] =
    "AWS4-HMAC-SHA256 Credential=reader/20261202/eu-west-1/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, "
    "Signature=45665be9f3f05bbe4a95a7549212cccd2c80de98d85759f5d7f93070bb08f7bf";

class SigV4VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(path_) << "tokens:\n"
                            "  - { name: reader, token: \"reader-secret-0123456\", views: [ByDay] }\n"
                            "  - { name: other, token: \"other-secret-01234567\", views: all }\n";
    auto tokens = security::TokenStore::Open(path_);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    tokens_ = *tokens;
    signed_at_ = absl::FromCivil(absl::CivilSecond(2026, 12, 2, 14, 24, 19), absl::UTCTimeZone());
  }

  SigV4Verdict Verify(std::string authorization, std::string target = "DynamoDB_20120810.GetItem",
                      std::string body = kBody, std::string date = kDate,
                      absl::Duration clock_offset = absl::ZeroDuration()) {
    headers_ = {{"Host", "localhost:8000"},
                {"Content-Type", "application/x-amz-json-1.0"},
                {"X-Amz-Target", target},
                {"User-Agent", "Boto3/1.34.0 md/Botocore#1.34.0"},
                {"X-Amz-Date", date},
                {"Authorization", authorization}};
    body_ = std::move(body);
    SignedRequest request;
    request.method = "POST";
    request.target = "/";
    for (const auto& [name, value] : headers_) {
      if (!value.empty()) request.headers.emplace_back(name, value);
    }
    request.body = body_;
    return precheck_ ? PrecheckSigV4(request, *tokens_, signed_at_ + clock_offset)
                     : VerifySigV4(request, *tokens_, signed_at_ + clock_offset);
  }

  void ExpectRefused(const SigV4Verdict& verdict, const std::string& type,
                     const std::string& message) {
    EXPECT_FALSE(verdict.ok);
    EXPECT_EQ(verdict.error_type, type);
    EXPECT_EQ(verdict.message, message);
  }

  test::TempDir dir_;
  std::string path_ = dir_.Sub("tokens.yaml");
  std::shared_ptr<security::TokenStore> tokens_;
  absl::Time signed_at_;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::string body_;
  bool precheck_ = false;  // Verify calls PrecheckSigV4
};

TEST_F(SigV4VerifyTest, AcceptsBotocoresSignaturesInAnyRegion) {
  SigV4Verdict get = Verify(kGetItemAuthorization);
  ASSERT_TRUE(get.ok) << get.error_type << ": " << get.message;
  EXPECT_EQ(get.who.name, "reader");
  EXPECT_EQ(get.who.views, std::vector<std::string>{"ByDay"});
  SigV4Verdict query = Verify(kQueryAuthorization, "DynamoDB_20120810.Query");
  ASSERT_TRUE(query.ok) << query.error_type << ": " << query.message;
  // Within 15 minutes either way of the signature's time.
  EXPECT_TRUE(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, kDate,
                     absl::Minutes(15))
                  .ok);
  EXPECT_TRUE(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, kDate,
                     -absl::Minutes(15))
                  .ok);
}

TEST_F(SigV4VerifyTest, AnythingSignedThatChangesFailsTheSignature) {
  const std::string mismatch = kSignatureMismatchMessage;
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.Scan"),
                "InvalidSignatureException", mismatch);
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem",
                       absl::StrReplaceAll(kBody, {{"I1", "I2"}})),
                "InvalidSignatureException", mismatch);
  // Another key's secret (the same signature presented under the name "other").
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"reader/", "other/"}})),
                "InvalidSignatureException", mismatch);
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"us-east-1", "us-east-2"}})),
                "InvalidSignatureException", mismatch);
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"=0177", "=0178"}})),
                "InvalidSignatureException", mismatch);
  // A shorter signature is compared without reading past it.
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"a2246e", ""}})),
                "InvalidSignatureException", mismatch);
}

TEST_F(SigV4VerifyTest, MissingUnknownAndMalformedCredentials) {
  ExpectRefused(Verify(""), "MissingAuthenticationTokenException",
                "Request is missing Authentication Token");
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"reader/", "nobody/"}})),
                "UnrecognizedClientException",
                "The security token included in the request is invalid.");
  // A bearer token meant for the gRPC ports is not echoed.
  ExpectRefused(Verify("Bearer reader-secret-0123456"), "IncompleteSignatureException",
                "Authorization header must use the AWS4-HMAC-SHA256 algorithm (AWS Signature "
                "Version 4)");
  ExpectRefused(Verify("AWS4-HMAC-SHA256 Credential=reader/20261202/us-east-1/dynamodb/aws4_request"),
                "IncompleteSignatureException",
                "Authorization header requires 'Signature' parameter. Authorization header "
                "requires 'SignedHeaders' parameter.");
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, "20261302T142419Z"),
                "IncompleteSignatureException",
                "X-Amz-Date must be yyyyMMddTHHmmssZ, got '20261302T142419Z'");
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, ""),
                "IncompleteSignatureException",
                "Authorization header requires existence of a 'X-Amz-Date' header.");
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"/dynamodb/", "/s3/"}})),
                "InvalidSignatureException",
                "Credential should be scoped to correct service: 'dynamodb'. ");
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"reader/20261202", "reader/20261201"}})),
                "InvalidSignatureException",
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
                "from HTTP: '20261201' != '20261202', from '20261202T142419Z'.");
}

TEST_F(SigV4VerifyTest, ASignatureMoreThanFifteenMinutesAwayHasExpired) {
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, kDate,
                       absl::Minutes(15) + absl::Seconds(1)),
                "InvalidSignatureException",
                "Signature expired: 20261202T142419Z is now earlier than 20261202T142420Z "
                "(20261202T143920Z - 15 min.)");
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, kDate,
                       -absl::Minutes(15) - absl::Seconds(1)),
                "InvalidSignatureException",
                "Signature not yet current: 20261202T142419Z is still later than "
                "20261202T142418Z (20261202T140918Z + 15 min.)");
}

// PrecheckSigV4 refuses what VerifySigV4 refuses without the signature itself, as VerifySigV4
// does; what only the signature decides (here a changed body) passes it, naming no one.
TEST_F(SigV4VerifyTest, ThePrecheckRefusesAllButWhatTheSignatureDecides) {
  precheck_ = true;
  SigV4Verdict good = Verify(kGetItemAuthorization);
  EXPECT_TRUE(good.ok) << good.message;
  EXPECT_EQ(good.who.name, "");
  EXPECT_TRUE(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem",
                     absl::StrReplaceAll(kBody, {{"I1", "I2"}}))
                  .ok);
  ExpectRefused(Verify(""), "MissingAuthenticationTokenException",
                "Request is missing Authentication Token");
  ExpectRefused(Verify(absl::StrReplaceAll(kGetItemAuthorization, {{"reader/", "nobody/"}})),
                "UnrecognizedClientException",
                "The security token included in the request is invalid.");
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, ""),
                "IncompleteSignatureException",
                "Authorization header requires existence of a 'X-Amz-Date' header.");
  ExpectRefused(Verify(kGetItemAuthorization, "DynamoDB_20120810.GetItem", kBody, kDate,
                       absl::Minutes(15) + absl::Seconds(1)),
                "InvalidSignatureException",
                "Signature expired: 20261202T142419Z is now earlier than 20261202T142420Z "
                "(20261202T143920Z - 15 min.)");
}

}  // namespace
}  // namespace cdcview::dynamodb
