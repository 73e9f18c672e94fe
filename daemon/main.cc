// cdcviewd: flags -> config -> Application; SIGTERM/SIGINT drain and exit.
#include <grpc/support/log.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/app/application.h"
#include "daemon/app/verify_command.h"
#include "daemon/config/config_yaml.h"
#include "daemon/log/log.h"

namespace {

// gRPC's own log lines go through the daemon's logger, so --log-json covers them too.
void GrpcLog(gpr_log_func_args* args) {
  cdcview::LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR ? cdcview::LogLevel::kError
                            : args->severity == GPR_LOG_SEVERITY_INFO ? cdcview::LogLevel::kInfo
                                                                      : cdcview::LogLevel::kDebug;
  cdcview::Log(level, absl::StrCat("grpc: ", args->message, " (", args->file, ":", args->line, ")"));
}

std::string HelpFooter() {
  std::vector<std::string> variables;
  for (const std::string& path : cdcview::EnvironmentSettablePaths()) {
    variables.push_back(absl::StrCat("  ", cdcview::EnvironmentName(path), "  (", path, ")"));
  }
  return absl::StrCat(
      "\nAny field can also be set with --set <path>=<value> (repeatable; a later one wins), "
      "e.g. --set apply.batch_size=512 or --set sources.orders.kafka.brokers=k1:9092.\n"
      "These variables set a field each (a flag wins over a variable, both over the file):\n",
      absl::StrJoin(variables, "\n"),
      "\n\nShutdown: SIGTERM drains within at most ", cdcview::Application::kMaxDrainTime.count(),
      " s (sources stop, the writer commits what was read, gRPC calls finish); "
      "terminationGracePeriodSeconds must exceed it.\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"cdcviewd: materializes DynamoDB-style views of a change stream into LMDB and serves them over gRPC"};
  cli.footer(HelpFooter());
  // 12-factor: each setting also comes from an environment variable; a flag wins over the
  // variable, both over the file (CLI11 reads the variable only when the flag is absent).
  std::string config_path = "examples/cdcview.yaml";
  std::string grpc_address, metrics_address, storage_path;
  std::vector<std::string> sets;
  std::string log_level = "info";
  bool log_json = false, print_config = false, verify_store = false;
  cli.add_option("--config", config_path, "YAML config file")->capture_default_str()->envname("CDCVIEW_CONFIG");
  auto* grpc_flag = cli.add_option("--grpc", grpc_address, "gRPC listen address host:port (overrides server.grpc)")
                        ->envname("CDCVIEW_GRPC");
  auto* metrics_flag = cli.add_option("--metrics", metrics_address,
                                      "metrics listen address host:port, \"\" disables (overrides server.metrics)")
                           ->envname("CDCVIEW_METRICS");
  auto* storage_flag = cli.add_option("--storage-path", storage_path, "LMDB directory (overrides storage.path)")
                           ->envname("CDCVIEW_STORAGE_PATH");
  cli.add_option("--set", sets, "set a config field: <path>=<value>, e.g. apply.batch_size=512 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  const std::map<std::string, cdcview::LogLevel> levels = {
      {"debug", cdcview::LogLevel::kDebug},
      {"info", cdcview::LogLevel::kInfo},
      {"warning", cdcview::LogLevel::kWarning},
      {"error", cdcview::LogLevel::kError}};
  cli.add_option("--log-level", log_level, "lowest level logged: debug, info, warning, error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str()
      ->envname("CDCVIEW_LOG_LEVEL");
  cli.add_flag("--log-json", log_json, "log JSON lines instead of plain text")->envname("CDCVIEW_LOG_JSON");
  cli.add_flag("--print-config", print_config, "print the effective config (file, environment, flags) as YAML and exit");
  cli.add_flag("--verify-store", verify_store,
               "check every page of the store at storage.path (stopped, or a copy) and exit: "
               "0 clean, 1 damaged (each problem listed), 2 not verified; progress on stderr");
  CLI11_PARSE(cli, argc, argv);
  cdcview::SetLogJson(log_json);
  cdcview::SetLogLevel(levels.at(log_level));
  gpr_set_log_function(GrpcLog);
  // Why the daemon cannot start: with --log-json a JSON line like any other (a crash-looping
  // pod's log stays parseable), else the plain "cdcviewd: why" a terminal user reads.
  auto fatal = [log_json](absl::string_view message, int code) {
    if (log_json) {
      cdcview::LogError(absl::StrCat("cdcviewd: ", message));
    } else {
      std::cerr << "cdcviewd: " << message << "\n";
    }
    return code;
  };

  // Variables first, then --set in order: a flag wins over a variable.
  std::vector<cdcview::ConfigSetting> settings =
      cdcview::SettingsFromEnvironment([](const char* name) { return std::getenv(name); });
  for (const std::string& text : sets) {
    auto setting = cdcview::ParseSetFlag(text);
    if (!setting.ok()) return fatal(setting.status().message(), 2);
    settings.push_back(*std::move(setting));
  }
  auto config = cdcview::LoadConfig(config_path, settings);
  if (!config.ok()) return fatal(config.status().message(), 2);
  cdcview::ConfigOverrides overrides;
  if (grpc_flag->count() > 0) overrides.grpc = grpc_address;
  if (metrics_flag->count() > 0) overrides.metrics = metrics_address;
  if (storage_flag->count() > 0) overrides.storage_path = storage_path;
  if (absl::Status s = cdcview::ApplyOverrides(overrides, &*config); !s.ok()) {
    return fatal(s.message(), 2);
  }
  if (print_config) {
    std::cout << cdcview::ConfigToYaml(*config);
    return 0;
  }
  if (verify_store) return cdcview::VerifyStoreCommand(*config, std::cout, std::cerr);

  // A file size limit (RLIMIT_FSIZE) fails the write that crosses it with EFBIG, which the
  // store and the dead-letter files report, instead of killing the process.
  signal(SIGXFSZ, SIG_IGN);
  // Block the stop signals in every thread; this one waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto app = cdcview::Application::Start(std::move(*config));
  if (!app.ok()) return fatal(app.status().message(), 1);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  cdcview::LogInfo(signal == SIGTERM ? "SIGTERM: draining" : "SIGINT: draining");
  (*app)->Shutdown();
  return 0;
}
