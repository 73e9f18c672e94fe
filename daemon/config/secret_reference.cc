#include "daemon/config/secret_reference.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cdcview {
namespace {

constexpr std::string_view kEnvPrefix = "${env:";
constexpr std::string_view kFilePrefix = "${file:";

absl::string_view Absl(std::string_view text) { return {text.data(), text.size()}; }

absl::StatusOr<std::string> FromEnvironment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || value[0] == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(
        "the environment variable ", name, " named by ${env:", name, "} is ",
        value == nullptr ? "not set" : "empty",
        ": set it in cdcviewd's environment (in Kubernetes, env.valueFrom.secretKeyRef), or "
        "give the value as ${file:PATH}"));
  }
  return std::string(value);
}

absl::StatusOr<std::string> FromFile(const std::string& path) {
  const std::string named = absl::StrCat("the file ", path, " named by ${file:", path, "}");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", named, ": ", std::strerror(errno),
                     "; mount the secret there (in Kubernetes, a volume from a Secret) or "
                     "correct the path"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, " is not a regular file; give the file that holds the value"));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, " is larger than ", kMaxSecretFileBytes,
                     " bytes; give the file that holds only the value"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", named, ": ", std::strerror(errno),
                     "; check that cdcviewd's user may read it"));
  }
  // Stops one chunk past the cap at most: a file in /proc or /sys says it has size 0 whatever
  // it holds, and a file may have grown since stat. Chunks of 64 KiB, as some of those files
  // refuse reads of odd sizes (/proc/self/pagemap: multiples of 8).
  constexpr size_t kChunk = 64 << 10;
  std::string text;
  while (text.size() <= kMaxSecretFileBytes) {
    const size_t had = text.size();
    text.resize(had + kChunk);
    const ssize_t n = ::read(fd, text.data() + had, kChunk);
    if (n < 0 && errno == EINTR) {
      text.resize(had);
      continue;
    }
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read ", named, ": ", std::strerror(error)));
    }
    text.resize(had + static_cast<size_t>(n));
    if (n == 0) break;
  }
  ::close(fd);
  if (text.size() > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(named, " is larger than ", kMaxSecretFileBytes,
                                                   " bytes; give the file that holds only the value"));
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

bool IsSecretProperty(std::string_view name) {
  // The properties librdkafka marks sensitive that the words below do not catch.
  static constexpr std::string_view kSensitive[] = {"ssl.key.pem", "ssl_key", "ssl.ca.pem",
                                                    "sasl.oauthbearer.config"};
  const std::string lower = absl::AsciiStrToLower(Absl(name));
  for (std::string_view sensitive : kSensitive) {
    if (lower == sensitive) return true;
  }
  for (std::string_view word : {"password", "secret", "passphrase", "private.key"}) {
    if (absl::StrContains(lower, Absl(word))) return true;
  }
  return false;
}

bool IsSecretReference(std::string_view value) {
  return value.starts_with("${") && value.ends_with("}");
}

absl::StatusOr<std::string> ResolveSecretReference(std::string_view value) {
  if (!IsSecretReference(value)) return std::string(value);
  const std::string_view inner = value.substr(0, value.size() - 1);
  if (inner.starts_with(kEnvPrefix) && inner.size() > kEnvPrefix.size()) {
    return FromEnvironment(std::string(inner.substr(kEnvPrefix.size())));
  }
  if (inner.starts_with(kFilePrefix) && inner.size() > kFilePrefix.size()) {
    return FromFile(std::string(inner.substr(kFilePrefix.size())));
  }
  return absl::InvalidArgumentError(
      "a value written ${...} must be ${env:NAME} (an environment variable) or ${file:PATH} "
      "(a file's contents)");
}

}  // namespace cdcview
