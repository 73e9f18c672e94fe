#include "daemon/security/token_store.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/log/log.h"
#include "yaml-cpp/yaml.h"

namespace cdcview::security {
namespace {

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> out;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), out.data());
  return out;
}

bool ValidName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

// This abseil's string_view is its own type.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool Principal::MayRead(std::string_view view) const {
  return all_views || std::binary_search(views.begin(), views.end(), view);
}

TokenStore::TokenStore(std::string path, absl::Duration check_interval)
    : path_(std::move(path)), check_interval_ns_(absl::ToInt64Nanoseconds(check_interval)) {}

absl::StatusOr<std::shared_ptr<TokenStore>> TokenStore::Open(std::string path,
                                                             prometheus::Registry* registry,
                                                             absl::Duration check_interval) {
  std::shared_ptr<TokenStore> store(new TokenStore(std::move(path), check_interval));
  absl::StatusOr<FileId> id = Identify(store->path_);
  if (!id.ok()) return id.status();
  absl::StatusOr<Table> table = Load(store->path_);
  if (!table.ok()) return table.status();
  {
    absl::MutexLock lock(&store->reload_mu_);
    store->file_ = *id;
  }
  {
    absl::MutexLock lock(&store->table_mu_);
    store->table_ = std::make_shared<const Table>(*std::move(table));
  }
  store->next_check_ns_.store(SteadyNanos() + store->check_interval_ns_);
  if (registry != nullptr) {
    auto& reloads = prometheus::BuildCounter()
                        .Name("cdcview_auth_tokens_reloads_total")
                        .Help("Times server.tokens_file changed and was loaded again (ok), or "
                              "changed and did not load, keeping the previous tokens (failed).")
                        .Register(*registry);
    store->reloads_ok_ = &reloads.Add({{"result", "ok"}});
    store->reloads_failed_ = &reloads.Add({{"result", "failed"}});
  }
  return store;
}

absl::StatusOr<TokenStore::FileId> TokenStore::Identify(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("server.tokens_file ", path, ": cannot read it: ", std::strerror(errno)));
  }
  FileId id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

absl::StatusOr<TokenStore::Table> TokenStore::Load(const std::string& path) {
  const std::string file = absl::StrCat("server.tokens_file ", path);
  // Read whole before parsing, and at most kMaxFileBytes of it: the path is a mounted Secret's,
  // but a wrong one (a device, a log) must not be read without end.
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(file, ": cannot read it: ", std::strerror(errno)));
  }
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": larger than ", kMaxFileBytes, " bytes; a tokens file holds a few entries"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not YAML: ", e.what()));
  }
  const auto invalid = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", Av(what)));
  };
  if (!root.IsMap() || !root["tokens"]) {
    return invalid("expected a map with a \"tokens\" list (tokens: [{name, token, views}])");
  }
  const YAML::Node tokens = root["tokens"];
  if (!tokens.IsSequence() && !tokens.IsNull()) return invalid("\"tokens\" must be a list");
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (key != "tokens") return invalid(absl::StrCat("unknown key \"", key, "\" (only tokens)"));
  }
  Table table;
  std::set<std::string> names;
  try {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const YAML::Node entry = tokens[i];
      std::string where = absl::StrCat("tokens[", i, "]");
      if (!entry.IsMap()) return invalid(absl::StrCat(where, ": expected a map {name, token, views}"));
      // The entry is named in messages only once its name is valid: a file with name and token
      // swapped must not log the token.
      const auto bad = [&](std::string_view what) { return invalid(absl::StrCat(where, ": ", Av(what))); };
      Entry out;
      if (!entry["name"] || !entry["name"].IsScalar()) return bad("missing \"name\"");
      out.principal.name = entry["name"].Scalar();
      if (!ValidName(out.principal.name)) {
        return bad("the name must be letters, digits, '_', '.' or '-'");
      }
      absl::StrAppend(&where, " (\"", out.principal.name, "\")");
      for (const auto& kv : entry) {
        const std::string key = kv.first.Scalar();
        if (key != "name" && key != "token" && key != "views" && key != "metrics") {
          return bad(absl::StrCat("unknown key \"", key, "\" (name, token, views, metrics)"));
        }
      }
      if (!names.insert(out.principal.name).second) return bad("the name appears twice");
      if (!entry["token"] || !entry["token"].IsScalar()) return bad("missing \"token\"");
      const std::string token = entry["token"].Scalar();
      if (token.size() < kMinTokenLength) {
        return bad(absl::StrFormat("the token has %d characters; at least %d are required",
                                   token.size(), kMinTokenLength));
      }
      if (absl::StrContains(token, ' ') || absl::StrContains(token, '\t')) {
        return bad("the token contains white space (it travels in an HTTP header)");
      }
      out.digest = Digest(token);
      out.token = token;
      for (const Entry& other : table) {
        if (other.digest == out.digest) {
          return bad(absl::StrCat("the same token as \"", other.principal.name, "\""));
        }
      }
      const YAML::Node views = entry["views"];
      if (!views) return bad("missing \"views\" (all, or a list of view names)");
      if (views.IsScalar() && views.Scalar() == "all") {
        out.principal.all_views = true;
      } else if (views.IsSequence()) {
        for (const YAML::Node& v : views) {
          if (!v.IsScalar() || v.Scalar().empty()) return bad("\"views\" lists a non-name");
          out.principal.views.push_back(v.Scalar());
        }
        std::sort(out.principal.views.begin(), out.principal.views.end());
        out.principal.views.erase(
            std::unique(out.principal.views.begin(), out.principal.views.end()),
            out.principal.views.end());
      } else {
        return bad("\"views\" must be all or a list of view names");
      }
      if (const YAML::Node metrics = entry["metrics"]) {
        out.principal.metrics = metrics.as<bool>();
      }
      table.push_back(std::move(out));
    }
  } catch (const YAML::Exception& e) {
    return invalid(e.what());
  }
  return table;
}

std::shared_ptr<const TokenStore::Table> TokenStore::Current() {
  absl::MutexLock lock(&table_mu_);
  return table_;
}

size_t TokenStore::size() {
  MaybeReload();
  return Current()->size();
}

void TokenStore::MaybeReload() {
  const int64_t now = SteadyNanos();
  if (now < next_check_ns_.load(std::memory_order_relaxed)) return;
  if (!reload_mu_.TryLock()) return;  // another thread is checking
  next_check_ns_.store(now + check_interval_ns_, std::memory_order_relaxed);
  absl::StatusOr<FileId> id = Identify(path_);
  if (id.ok() && (*id == file_ || *id == failed_file_)) {
    reload_mu_.Unlock();
    return;
  }
  absl::StatusOr<Table> table = id.ok() ? Load(path_) : absl::StatusOr<Table>(id.status());
  if (table.ok()) {
    file_ = *id;
    failed_file_ = FileId{};
    std::vector<std::string> names;
    for (const Entry& e : *table) names.push_back(e.principal.name);
    LogInfo(absl::StrFormat("server.tokens_file %s reloaded: %d tokens (%s)", path_,
                            table->size(), absl::StrJoin(names, ", ")));
    {
      absl::MutexLock lock(&table_mu_);
      table_ = std::make_shared<const Table>(*std::move(table));
    }
    if (reloads_ok_ != nullptr) reloads_ok_->Increment();
  } else {
    // A missing file is retried on every check (a Secret update may be half done); a file that
    // does not parse is retried only when it changes again, so it is logged once per change.
    if (id.ok()) failed_file_ = *id;
    LogWarning(absl::StrCat("server.tokens_file changed but did not load; keeping the previous ",
                            Current()->size(), " tokens: ", table.status().message()));
    if (reloads_failed_ != nullptr) reloads_failed_->Increment();
  }
  reload_mu_.Unlock();
}

absl::StatusOr<Principal> TokenStore::Authenticate(std::string_view header) {
  MaybeReload();
  const absl::string_view value = absl::StripAsciiWhitespace(Av(header));
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError(kNoTokenMessage);
  }
  const absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(kScheme.size()));
  const std::array<unsigned char, 32> digest = Digest(token);
  const std::shared_ptr<const Table> table = Current();
  // Every entry is compared, whichever matches; the index is picked without a branch on the
  // comparison's result.
  size_t match = table->size();
  for (size_t i = 0; i < table->size(); ++i) {
    const size_t equal = CRYPTO_memcmp(digest.data(), (*table)[i].digest.data(), digest.size()) == 0;
    match = equal * i + (1 - equal) * match;
  }
  if (match == table->size()) return absl::UnauthenticatedError(kBadTokenMessage);
  return (*table)[match].principal;
}

std::optional<TokenStore::NamedToken> TokenStore::FindByName(std::string_view name) {
  MaybeReload();
  const std::shared_ptr<const Table> table = Current();
  for (const Entry& entry : *table) {
    if (entry.principal.name == name) return NamedToken{entry.token, entry.principal};
  }
  return std::nullopt;
}

absl::Status TokenStore::PermitView(const Principal& who, std::string_view view) {
  if (who.MayRead(view)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("token \"", who.name, "\" may not read view \"", Av(view),
                   "\": add the view to its views in server.tokens_file"));
}

absl::Status TokenStore::PermitMetrics(const Principal& who) {
  if (who.metrics) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "token \"", who.name, "\" may not scrape /metrics: set metrics: true on it in "
      "server.tokens_file"));
}

}  // namespace cdcview::security
