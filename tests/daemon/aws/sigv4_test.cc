// SigV4 against AWS's published Signature Version 4 test suite (aws-sig-v4-test-suite, the
// requests dated 20150830T123600Z, region us-east-1, service "service", key AKIDEXAMPLE) and
// the IAM ListUsers example of the SigV4 documentation.
#include "daemon/aws/sigv4.h"

#include <gtest/gtest.h>

namespace cdcview::aws {
namespace {

const SigningKey kSuiteKey{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const absl::Time kSuiteTime = absl::FromUnixSeconds(1440938160);  // 20150830T123600Z

std::string AuthFor(const std::string& signature, const std::string& signed_headers) {
  return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
         "SignedHeaders=" + signed_headers + ", Signature=" + signature;
}

RequestToSign SuiteRequest(std::string method, HeaderList extra = {}) {
  RequestToSign r;
  r.method = std::move(method);
  r.path = "/";
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.headers.insert(r.headers.end(), extra.begin(), extra.end());
  return r;
}

TEST(SigV4Test, GetVanilla) {
  SignedParts p = Sign(SuiteRequest("GET"), kSuiteKey, "us-east-1", "service", kSuiteTime);
  EXPECT_EQ(p.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(p.string_to_sign.substr(0, p.string_to_sign.rfind('\n')),
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request");
  EXPECT_EQ(p.authorization,
            AuthFor("5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
                    "host;x-amz-date"));
  // The request already had X-Amz-Date: only Authorization is added.
  ASSERT_EQ(p.added_headers.size(), 1u);
  EXPECT_EQ(p.added_headers[0].first, "Authorization");
}

TEST(SigV4Test, PostVanilla) {
  SignedParts p = Sign(SuiteRequest("POST"), kSuiteKey, "us-east-1", "service", kSuiteTime);
  EXPECT_EQ(p.signature, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(SigV4Test, GetVanillaQueryOrderKeyCase) {
  RequestToSign r = SuiteRequest("GET");
  r.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  SignedParts p = Sign(r, kSuiteKey, "us-east-1", "service", kSuiteTime);
  EXPECT_EQ(p.canonical_request.substr(0, 28), "GET\n/\nParam1=value1&Param2=v");
  EXPECT_EQ(p.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4Test, PostXWwwFormUrlencoded) {
  RequestToSign r = SuiteRequest("POST", {{"Content-Type", "application/x-www-form-urlencoded"}});
  r.body = "Param1=value1";
  SignedParts p = Sign(r, kSuiteKey, "us-east-1", "service", kSuiteTime);
  EXPECT_EQ(p.canonical_request.substr(p.canonical_request.rfind('\n') + 1),
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(p.authorization,
            AuthFor("ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
                    "content-type;host;x-amz-date"));
}

TEST(SigV4Test, GetHeaderKeyDuplicateJoinsValuesInOrder) {
  RequestToSign r = SuiteRequest(
      "GET", {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}});
  SignedParts p = Sign(r, kSuiteKey, "us-east-1", "service", kSuiteTime);
  EXPECT_NE(p.canonical_request.find("my-header1:value2,value2,value1\n"), std::string::npos);
  EXPECT_EQ(p.authorization,
            AuthFor("c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
                    "host;my-header1;x-amz-date"));
}

TEST(SigV4Test, GetHeaderValueTrimCollapsesSpaces) {
  RequestToSign r =
      SuiteRequest("GET", {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}});
  SignedParts p = Sign(r, kSuiteKey, "us-east-1", "service", kSuiteTime);
  EXPECT_NE(p.canonical_request.find("my-header1:value1\nmy-header2:\"a b c\"\n"),
            std::string::npos);
  EXPECT_EQ(p.signature, "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736");
}

TEST(SigV4Test, PostStsHeaderBeforeSignsTheSessionToken) {
  SigningKey key = kSuiteKey;
  key.session_token =
      "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
  SignedParts p = Sign(SuiteRequest("POST"), key, "us-east-1", "service", kSuiteTime);
  EXPECT_EQ(p.authorization,
            AuthFor("85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
                    "host;x-amz-date;x-amz-security-token"));
  ASSERT_EQ(p.added_headers.size(), 2u);
  EXPECT_EQ(p.added_headers[0], (std::pair<std::string, std::string>{"X-Amz-Security-Token",
                                                                     key.session_token}));
}

// The documentation's example: GET https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08.
TEST(SigV4Test, IamListUsersExample) {
  RequestToSign r;
  r.method = "GET";
  r.query = {{"Action", "ListUsers"}, {"Version", "2010-05-08"}};
  r.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
               {"Host", "iam.amazonaws.com"}};
  SignedParts p = Sign(r, kSuiteKey, "us-east-1", "iam", kSuiteTime);
  EXPECT_EQ(Sha256Hex(p.canonical_request),
            "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59");
  EXPECT_EQ(p.signature, "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
  ASSERT_EQ(p.added_headers.size(), 2u);
  EXPECT_EQ(p.added_headers[0], (std::pair<std::string, std::string>{"X-Amz-Date",
                                                                     "20150830T123600Z"}));
}

TEST(SigV4Test, DerivedSigningKeyOfTheDocumentation) {
  EXPECT_EQ(HexEncode(DerivedSigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215",
                                        "us-east-1", "iam")),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
}

TEST(SigV4Test, UriEncodeKeepsOnlyUnreserved) {
  EXPECT_EQ(UriEncode("a b/c~d-_.é"), "a%20b%2Fc~d-_.%C3%A9");
  EXPECT_EQ(AmzDate(kSuiteTime), "20150830T123600Z");
}

}  // namespace
}  // namespace cdcview::aws
