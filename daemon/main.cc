// cdcviewd: flags -> config -> Application; SIGTERM/SIGINT drain and exit.
#include <csignal>
#include <iostream>

#include "CLI/CLI.hpp"
#include "daemon/app/application.h"
#include "daemon/config/config_yaml.h"
#include "daemon/log/log.h"

int main(int argc, char** argv) {
  CLI::App cli{"cdcviewd: materializes DynamoDB-style views of a change stream into LMDB and serves them over gRPC"};
  // 12-factor: each setting also comes from an environment variable; a flag wins over the
  // variable, both over the file (CLI11 reads the variable only when the flag is absent).
  std::string config_path = "examples/cdcview.yaml";
  std::string grpc_address, metrics_address, storage_path;
  bool log_json = false, print_config = false;
  cli.add_option("--config", config_path, "YAML config file")->capture_default_str()->envname("CDCVIEW_CONFIG");
  auto* grpc_flag = cli.add_option("--grpc", grpc_address, "gRPC listen address host:port (overrides server.grpc)")
                        ->envname("CDCVIEW_GRPC");
  auto* metrics_flag = cli.add_option("--metrics", metrics_address,
                                      "metrics listen address host:port, \"\" disables (overrides server.metrics)")
                           ->envname("CDCVIEW_METRICS");
  auto* storage_flag = cli.add_option("--storage-path", storage_path, "LMDB directory (overrides storage.path)")
                           ->envname("CDCVIEW_STORAGE_PATH");
  cli.add_flag("--log-json", log_json, "log JSON lines instead of plain text")->envname("CDCVIEW_LOG_JSON");
  cli.add_flag("--print-config", print_config, "print the effective config (file, environment, flags) as YAML and exit");
  CLI11_PARSE(cli, argc, argv);
  cdcview::SetLogJson(log_json);

  auto config = cdcview::LoadConfig(config_path);
  if (!config.ok()) {
    std::cerr << "cdcviewd: " << config.status().message() << "\n";
    return 2;
  }
  cdcview::ConfigOverrides overrides;
  if (grpc_flag->count() > 0) overrides.grpc = grpc_address;
  if (metrics_flag->count() > 0) overrides.metrics = metrics_address;
  if (storage_flag->count() > 0) overrides.storage_path = storage_path;
  if (absl::Status s = cdcview::ApplyOverrides(overrides, &*config); !s.ok()) {
    std::cerr << "cdcviewd: " << s.message() << "\n";
    return 2;
  }
  if (print_config) {
    std::cout << cdcview::ConfigToYaml(*config);
    return 0;
  }

  // Block the stop signals in every thread; this one waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto app = cdcview::Application::Start(std::move(*config));
  if (!app.ok()) {
    std::cerr << "cdcviewd: " << app.status().message() << "\n";
    return 1;
  }
  int signal = 0;
  sigwait(&stop_signals, &signal);
  cdcview::LogInfo(signal == SIGTERM ? "SIGTERM: draining" : "SIGINT: draining");
  (*app)->Shutdown();
  return 0;
}
