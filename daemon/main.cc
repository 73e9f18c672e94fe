// cdcviewd: flags -> config -> Application; SIGTERM/SIGINT drain and exit.
#include <csignal>
#include <iostream>

#include "CLI/CLI.hpp"
#include "daemon/app/application.h"
#include "daemon/log/log.h"

int main(int argc, char** argv) {
  CLI::App cli{"cdcviewd: materializes DynamoDB-style views of a change stream into LMDB and serves them over gRPC"};
  std::string config_path = "examples/cdcview.yaml";
  std::string grpc_address, metrics_address, storage_path;
  bool log_json = false;
  cli.add_option("--config", config_path, "YAML config file")->capture_default_str();
  cli.add_option("--grpc", grpc_address, "gRPC listen address host:port (overrides server.grpc)");
  cli.add_option("--metrics", metrics_address, "metrics listen address host:port (overrides server.metrics)");
  cli.add_option("--storage-path", storage_path, "LMDB directory (overrides storage.path)");
  cli.add_flag("--log-json", log_json, "log JSON lines instead of plain text");
  CLI11_PARSE(cli, argc, argv);
  cdcview::SetLogJson(log_json);

  auto config = cdcview::LoadConfig(config_path);
  if (!config.ok()) {
    std::cerr << "cdcviewd: " << config.status().message() << "\n";
    return 2;
  }
  if (!grpc_address.empty()) config->server.grpc = grpc_address;
  if (!metrics_address.empty()) config->server.metrics = metrics_address;
  if (!storage_path.empty()) config->storage.path = storage_path;

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
