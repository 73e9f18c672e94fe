#include "daemon/log/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cdcview {
namespace {

std::atomic<bool> g_json{false};
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "info";
}

std::string Timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

}  // namespace

void SetLogJson(bool json) { g_json = json; }
void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

void Log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < g_level.load()) return;
  std::string line =
      g_json ? absl::StrCat("{\"ts\":\"", Timestamp(), "\",\"level\":\"", LevelName(level),
                            "\",\"msg\":\"", JsonEscape(message), "\"}\n")
             : absl::StrCat(Timestamp(), " ", LevelName(level), " ", absl::string_view(message.data(), message.size()), "\n");
  std::lock_guard lock(g_mu);
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace cdcview
