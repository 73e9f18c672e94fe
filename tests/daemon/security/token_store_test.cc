#include "daemon/security/token_store.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "absl/time/time.h"
#include "daemon/security/auth_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview::security {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kOrders[] = "orders-token-0123456789";
constexpr char kAdmin[] = "admin-token-abcdefghijk";

constexpr char kTwoTokens[] = R"(tokens:
  - name: orders-api
    token: "orders-token-0123456789"
    views: [votes_by_day, by_customer]
  - name: admin.ops_1
    token: "admin-token-abcdefghijk"
    views: all
    metrics: true
)";

double Value(prometheus::Registry& registry, const std::string& name,
             const std::map<std::string, std::string>& labels) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got == labels) return m.counter.value;
    }
  }
  ADD_FAILURE() << "no series " << name;
  return -1;
}

class TokenStoreTest : public ::testing::Test {
 protected:
  // Writes through a new file and a rename, as a Secret update does: a new inode each time.
  void Write(const std::string& text) {
    const std::string tmp = dir_.Sub("tokens.yaml.new");
    std::ofstream(tmp) << text;
    ASSERT_EQ(std::rename(tmp.c_str(), path_.c_str()), 0);
  }
  std::shared_ptr<TokenStore> Open(absl::Duration interval = absl::ZeroDuration()) {
    absl::StatusOr<std::shared_ptr<TokenStore>> store =
        TokenStore::Open(path_, &registry_, interval);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *store : nullptr;
  }
  absl::Status LoadError(const std::string& text) {
    Write(text);
    absl::StatusOr<std::shared_ptr<TokenStore>> store = TokenStore::Open(path_);
    EXPECT_FALSE(store.ok());
    return store.status();
  }
  double Reloads(const std::string& result) {
    return Value(registry_, "cdcview_auth_tokens_reloads_total", {{"result", result}});
  }

  test::TempDir dir_;
  std::string path_ = dir_.Sub("tokens.yaml");
  prometheus::Registry registry_;
};

TEST_F(TokenStoreTest, AuthenticatesEachTokenAsItsEntry) {
  Write(kTwoTokens);
  std::shared_ptr<TokenStore> store = Open();
  absl::StatusOr<Principal> orders = store->Authenticate(std::string("Bearer ") + kOrders);
  ASSERT_TRUE(orders.ok()) << orders.status();
  EXPECT_EQ(orders->name, "orders-api");
  EXPECT_FALSE(orders->all_views);
  EXPECT_THAT(orders->views, ElementsAre("by_customer", "votes_by_day"));
  EXPECT_FALSE(orders->metrics);
  EXPECT_TRUE(orders->MayRead("by_customer"));
  EXPECT_FALSE(orders->MayRead("by_product"));

  // The scheme is case-insensitive (RFC 7235); surrounding white space is not part of the token.
  absl::StatusOr<Principal> admin = store->Authenticate(std::string(" bearer  ") + kAdmin + " ");
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->name, "admin.ops_1");
  EXPECT_TRUE(admin->all_views);
  EXPECT_TRUE(admin->metrics);
  EXPECT_TRUE(admin->MayRead("anything"));
  EXPECT_EQ(store->size(), 2u);
}

// The DynamoDB endpoint's SigV4 check looks an entry up by name (the access key id) and signs
// with its token; a reload changes what the name finds.
TEST_F(TokenStoreTest, FindsAnEntryByNameWithItsToken) {
  Write(kTwoTokens);
  std::shared_ptr<TokenStore> store = Open();
  std::optional<TokenStore::NamedToken> orders = store->FindByName("orders-api");
  ASSERT_TRUE(orders.has_value());
  EXPECT_EQ(orders->token, kOrders);
  EXPECT_EQ(orders->principal.name, "orders-api");
  EXPECT_THAT(orders->principal.views, ElementsAre("by_customer", "votes_by_day"));
  std::optional<TokenStore::NamedToken> admin = store->FindByName("admin.ops_1");
  ASSERT_TRUE(admin.has_value());
  EXPECT_EQ(admin->token, kAdmin);
  EXPECT_TRUE(admin->principal.all_views);
  EXPECT_FALSE(store->FindByName("orders").has_value());
  EXPECT_FALSE(store->FindByName("").has_value());
  EXPECT_FALSE(store->FindByName(kOrders).has_value());

  Write("tokens:\n  - { name: orders-api, token: \"another-token-of-orders\", views: all }\n");
  orders = store->FindByName("orders-api");
  ASSERT_TRUE(orders.has_value());
  EXPECT_EQ(orders->token, "another-token-of-orders");
  EXPECT_TRUE(orders->principal.all_views);
  EXPECT_FALSE(store->FindByName("admin.ops_1").has_value());
}

TEST_F(TokenStoreTest, RefusesMissingAndUnknownTokensWithTheExactMessages) {
  Write(kTwoTokens);
  std::shared_ptr<TokenStore> store = Open();
  const std::string no_token =
      "no bearer token: send the header \"authorization: Bearer <token>\" (cdcview --token-file "
      "FILE)";
  for (const char* header : {"", "Bearer", "Bearer ", "Basic b3JkZXJzOnB3", kOrders}) {
    absl::StatusOr<Principal> who = store->Authenticate(header);
    EXPECT_EQ(who.status(), absl::UnauthenticatedError(no_token)) << header;
  }
  for (const char* header : {"Bearer orders-token-012345678", "Bearer orders-token-01234567890",
                             "Bearer ORDERS-TOKEN-0123456789"}) {
    absl::StatusOr<Principal> who = store->Authenticate(header);
    EXPECT_EQ(who.status(), absl::UnauthenticatedError(
                                "the bearer token is not one of server.tokens_file's tokens"))
        << header;
  }
}

TEST_F(TokenStoreTest, PermissionMessagesNameTheTokenAndTheView) {
  Principal orders{.name = "orders-api", .views = {"by_customer"}};
  EXPECT_TRUE(TokenStore::PermitView(orders, "by_customer").ok());
  EXPECT_EQ(TokenStore::PermitView(orders, "votes_by_day"),
            absl::PermissionDeniedError("token \"orders-api\" may not read view \"votes_by_day\": "
                                        "add the view to its views in server.tokens_file"));
  EXPECT_EQ(TokenStore::PermitMetrics(orders),
            absl::PermissionDeniedError("token \"orders-api\" may not scrape /metrics: set "
                                        "metrics: true on it in server.tokens_file"));
  orders.metrics = true;
  EXPECT_TRUE(TokenStore::PermitMetrics(orders).ok());
}

TEST_F(TokenStoreTest, AnEntryWithNameAndTokenSwappedIsRefusedWithoutTheTokenInTheMessage) {
  const std::string file = "server.tokens_file " + path_ + ": ";
  absl::Status swapped = LoadError(
      "tokens:\n  - name: \"k9/Qx+Zr2m=Wv7Lp\"\n    token: orders-api\n    views: all\n");
  EXPECT_EQ(swapped, absl::InvalidArgumentError(file + "tokens[0]: the name must be letters, "
                                                       "digits, '_', '.' or '-'"));
  EXPECT_THAT(std::string(swapped.message()), Not(HasSubstr("k9/Qx+Zr2m=Wv7Lp")));
}

TEST_F(TokenStoreTest, LoadErrorsNameTheFileAndTheEntry) {
  const std::string file = "server.tokens_file " + path_ + ": ";
  EXPECT_EQ(LoadError("tokens:\n  - name: short\n    token: \"fifteen-chars-x\"\n    views: all\n"),
            absl::InvalidArgumentError(file + "tokens[0] (\"short\"): the token has 15 "
                                              "characters; at least 16 are required"));
  EXPECT_EQ(LoadError(std::string(kTwoTokens) + "  - name: \"bad name\"\n    token: x\n"),
            absl::InvalidArgumentError(file + "tokens[2]: the name must be letters, digits, "
                                              "'_', '.' or '-'"));
  EXPECT_EQ(LoadError(std::string(kTwoTokens) +
                      "  - name: orders-api\n    token: another-token-0123456\n    views: all\n"),
            absl::InvalidArgumentError(file + "tokens[2] (\"orders-api\"): the name appears twice"));
  EXPECT_EQ(LoadError(std::string(kTwoTokens) +
                      "  - name: copy\n    token: orders-token-0123456789\n    views: all\n"),
            absl::InvalidArgumentError(file + "tokens[2] (\"copy\"): the same token as "
                                              "\"orders-api\""));
  EXPECT_EQ(LoadError("tokens:\n  - name: a\n    token: orders-token-0123456789\n"),
            absl::InvalidArgumentError(file + "tokens[0] (\"a\"): missing \"views\" (all, or a "
                                              "list of view names)"));
  EXPECT_EQ(LoadError("tokens:\n  - name: a\n    token: orders-token-0123456789\n    view: all\n"),
            absl::InvalidArgumentError(file + "tokens[0] (\"a\"): unknown key \"view\" (name, "
                                              "token, views, metrics)"));
  EXPECT_EQ(LoadError("tokens:\n  - name: a\n    token: orders-token-0123456789\n    views: some\n"),
            absl::InvalidArgumentError(file + "tokens[0] (\"a\"): \"views\" must be all or a "
                                              "list of view names"));
  EXPECT_EQ(LoadError("- name: a\n"),
            absl::InvalidArgumentError(file + "expected a map with a \"tokens\" list (tokens: "
                                              "[{name, token, views}])"));
  EXPECT_EQ(LoadError("tokens: [\n").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadError("tokens: []\n" + std::string(TokenStore::kMaxFileBytes, '#')),
            absl::InvalidArgumentError(file + "larger than 1048576 bytes; a tokens file holds a "
                                              "few entries"));
  std::remove(path_.c_str());
  EXPECT_EQ(TokenStore::Open(path_).status(),
            absl::NotFoundError(file + "cannot read it: No such file or directory"));
}

TEST_F(TokenStoreTest, ReloadsAChangedFile) {
  Write(kTwoTokens);
  std::shared_ptr<TokenStore> store = Open();
  const std::string added = "Bearer added-token-0123456789";
  EXPECT_EQ(store->Authenticate(added).status().code(), absl::StatusCode::kUnauthenticated);
  Write("tokens:\n  - name: added\n    token: added-token-0123456789\n    views: [v]\n");
  absl::StatusOr<Principal> who = store->Authenticate(added);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->name, "added");
  EXPECT_EQ(store->Authenticate(std::string("Bearer ") + kOrders).status().code(),
            absl::StatusCode::kUnauthenticated);  // removed with the rewrite
  EXPECT_EQ(Reloads("ok"), 1);
  EXPECT_EQ(Reloads("failed"), 0);
}

TEST_F(TokenStoreTest, ABadFileKeepsThePreviousTokensAndCountsOnce) {
  Write(kTwoTokens);
  std::shared_ptr<TokenStore> store = Open();
  Write("tokens:\n  - name: a\n    token: short\n    views: all\n");
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Principal> who = store->Authenticate(std::string("Bearer ") + kOrders);
    ASSERT_TRUE(who.ok()) << who.status();
    EXPECT_EQ(who->name, "orders-api");
  }
  EXPECT_EQ(Reloads("failed"), 1);  // once per change, not once per check
  EXPECT_EQ(Reloads("ok"), 0);
  std::remove(path_.c_str());  // a missing file: still the previous tokens
  EXPECT_TRUE(store->Authenticate(std::string("Bearer ") + kAdmin).ok());
  EXPECT_EQ(Reloads("failed"), 2);
  Write(kTwoTokens);
  EXPECT_TRUE(store->Authenticate(std::string("Bearer ") + kAdmin).ok());
  EXPECT_EQ(Reloads("ok"), 1);
}

TEST_F(TokenStoreTest, ChecksTheFileAtMostOncePerInterval) {
  Write(kTwoTokens);
  std::shared_ptr<TokenStore> store = Open(absl::Hours(1));
  Write("tokens: []\n");
  EXPECT_TRUE(store->Authenticate(std::string("Bearer ") + kOrders).ok());
  EXPECT_EQ(Reloads("ok"), 0);
}

TEST(AuthProbeTest, CountsRefusalsByReason) {
  prometheus::Registry registry;
  AuthProbe grpc(registry, "grpc");
  AuthProbe fast(registry, "fast_reads");
  grpc.RecordRefusal(absl::UnauthenticatedError(kNoTokenMessage));
  grpc.RecordRefusal(absl::UnauthenticatedError(kBadTokenMessage));
  grpc.RecordRefusal(absl::UnauthenticatedError(kBadTokenMessage));
  grpc.RecordRefusal(absl::PermissionDeniedError("token \"a\" may not read view \"v\""));
  grpc.RecordRefusal(absl::OkStatus());
  fast.RecordRefusal(absl::UnauthenticatedError(kNoTokenMessage));
  const std::string name = "cdcview_auth_refused_total";
  EXPECT_EQ(Value(registry, name, {{"port", "grpc"}, {"reason", "no_token"}}), 1);
  EXPECT_EQ(Value(registry, name, {{"port", "grpc"}, {"reason", "bad_token"}}), 2);
  EXPECT_EQ(Value(registry, name, {{"port", "grpc"}, {"reason", "view_denied"}}), 1);
  EXPECT_EQ(Value(registry, name, {{"port", "fast_reads"}, {"reason", "no_token"}}), 1);
  EXPECT_EQ(Value(registry, name, {{"port", "fast_reads"}, {"reason", "bad_token"}}), 0);
}

}  // namespace
}  // namespace cdcview::security
