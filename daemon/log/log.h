// Log: the daemon's log lines on stderr, plain text or JSON lines.
//
// Thread-safe: a line is written with one write() call under a mutex. Counts and progress at
// info level; never a line per event.
#pragma once

#include <string_view>

namespace cdcview {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

void SetLogJson(bool json);
void SetLogLevel(LogLevel level);
void Log(LogLevel level, std::string_view message);

inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(std::string_view m) { Log(LogLevel::kWarning, m); }
inline void LogError(std::string_view m) { Log(LogLevel::kError, m); }

}  // namespace cdcview
