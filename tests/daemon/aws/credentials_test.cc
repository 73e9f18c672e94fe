#include "daemon/aws/credentials.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/fakes/fake_http_server.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview::aws {
namespace {

using test::FakeHttpServer;

CredentialsProvider::Getenv Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(CredentialsTest, EnvironmentFirst) {
  HttpClient http;
  CredentialsProvider p(&http, "us-east-1",
                        Env({{"AWS_ACCESS_KEY_ID", "AK"}, {"AWS_SECRET_ACCESS_KEY", "SK"},
                             {"AWS_SESSION_TOKEN", "ST"},
                             {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/"}}));
  auto key = p.Get();
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->access_key_id, "AK");
  EXPECT_EQ(key->secret_access_key, "SK");
  EXPECT_EQ(key->session_token, "ST");
  EXPECT_EQ(p.source(), "environment");
}

TEST(CredentialsTest, NoneFoundNamesTheVariables) {
  HttpClient http;
  CredentialsProvider p(&http, "us-east-1", Env({}));
  auto key = p.Get();
  EXPECT_EQ(key.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(key.status().message(),
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
            "AWS_SESSION_TOKEN for temporary keys), or AWS_WEB_IDENTITY_TOKEN_FILE and "
            "AWS_ROLE_ARN, or AWS_CONTAINER_CREDENTIALS_FULL_URI / "
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI; credentials are never read from the "
            "config file");
}

TEST(CredentialsTest, HalfAPairIsAnError) {
  HttpClient http;
  CredentialsProvider p(&http, "us-east-1", Env({{"AWS_ACCESS_KEY_ID", "AK"}}));
  EXPECT_EQ(p.Get().status().message(),
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both");
}

TEST(CredentialsTest, ContainerCredentialsAreRefreshedBeforeExpiry) {
  FakeHttpServer server(
      {{200, R"({"AccessKeyId":"A1","SecretAccessKey":"S1","Token":"T1","Expiration":"2030-01-01T00:10:00Z"})"},
       {200, R"({"AccessKeyId":"A2","SecretAccessKey":"S2","Token":"T2","Expiration":"2030-01-01T01:00:00Z"})"}});
  HttpClient http;
  absl::Time now = absl::FromCivil(absl::CivilSecond(2030, 1, 1, 0, 0, 0), absl::UTCTimeZone());
  CredentialsProvider p(&http, "us-east-1",
                        Env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", server.url() + "creds"},
                             {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer xyz"}}),
                        [&] { return now; });
  EXPECT_EQ(p.Get()->access_key_id, "A1");
  now += absl::Minutes(4);  // 6 minutes left: still good
  EXPECT_EQ(p.Get()->access_key_id, "A1");
  now += absl::Minutes(2);  // 4 minutes left: refreshed
  auto key = p.Get();
  EXPECT_EQ(key->access_key_id, "A2");
  EXPECT_EQ(key->session_token, "T2");
  EXPECT_EQ(p.source(), "container");
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].path, "/creds");
  EXPECT_EQ(requests[0].headers["authorization"], "Bearer xyz");
}

TEST(CredentialsTest, WebIdentityAssumesTheRole) {
  FakeHttpServer server({{200, R"(<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>
  <Credentials><SessionToken>TOK</SessionToken><SecretAccessKey>SEC</SecretAccessKey>
  <Expiration>2030-01-01T01:00:00Z</Expiration><AccessKeyId>ASIA1</AccessKeyId></Credentials>
  </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>)"}});
  test::TempDir dir;
  std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "eyJ.token\n";
  HttpClient http;
  CredentialsProvider p(&http, "us-east-1",
                        Env({{"AWS_WEB_IDENTITY_TOKEN_FILE", token_file},
                             {"AWS_ROLE_ARN", "arn:aws:iam::1:role/cdcview"},
                             {"AWS_ENDPOINT_URL_STS", server.url()}}));
  auto key = p.Get();
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->access_key_id, "ASIA1");
  EXPECT_EQ(key->secret_access_key, "SEC");
  EXPECT_EQ(key->session_token, "TOK");
  EXPECT_EQ(server.requests()[0].body,
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fcdcview"
            "&RoleSessionName=cdcviewd&WebIdentityToken=eyJ.token");
}

TEST(CredentialsTest, StsErrorIsReported) {
  std::optional<absl::Time> expiration;
  auto key = ParseAssumeRoleResponse(
      "<ErrorResponse><Error><Code>AccessDenied</Code><Message>Not authorized to perform "
      "sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>",
      &expiration);
  EXPECT_EQ(key.status().message(),
            "STS AssumeRoleWithWebIdentity failed: Not authorized to perform "
            "sts:AssumeRoleWithWebIdentity");
}

// An STS or container endpoint whose error quotes the request must not pass the token on.
TEST(CredentialsTest, ErrorsThatEchoTheRequestCarryNoToken) {
  FakeHttpServer sts({{400, "<ErrorResponse><Error><Message>bad request: "
                            "WebIdentityToken=eyJ.secret-jwt</Message></Error></ErrorResponse>"}});
  test::TempDir dir;
  std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "eyJ.secret-jwt\n";
  HttpClient http;
  CredentialsProvider web(&http, "us-east-1",
                          Env({{"AWS_WEB_IDENTITY_TOKEN_FILE", token_file},
                               {"AWS_ROLE_ARN", "arn:aws:iam::1:role/cdcview"},
                               {"AWS_ENDPOINT_URL_STS", sts.url()}}));
  EXPECT_EQ(std::string(web.Get().status().message()),
            "STS AssumeRoleWithWebIdentity failed: bad request: WebIdentityToken=<redacted> "
            "(HTTP 400 from " + sts.url() + ", role arn:aws:iam::1:role/cdcview)");

  FakeHttpServer container({{403, "denied: Authorization: container-secret-token"}});
  CredentialsProvider ecs(&http, "us-east-1",
                          Env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url() + "creds"},
                               {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-secret-token"}}));
  EXPECT_EQ(std::string(ecs.Get().status().message()),
            "container credentials endpoint " + container.url() +
                "creds answered HTTP 403: denied: Authorization: <redacted>");
}

}  // namespace
}  // namespace cdcview::aws
