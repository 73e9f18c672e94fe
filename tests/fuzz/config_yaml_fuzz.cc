// The config loader (daemon/config/config.h) on arbitrary bytes as a YAML file: ParseConfig
// returns a Config or INVALID_ARGUMENT naming the problem, never aborts (yaml-cpp's exceptions
// stay inside the loader). A Config it accepted, printed as --print-config prints it
// (ConfigToYaml), parses again, and prints the same: the effective configuration an operator
// sees is the one the daemon runs.
#include <cstdint>
#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_yaml.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cdcview;
  const std::string yaml(fuzz::Bytes(data, size));
  absl::StatusOr<Config> config = ParseConfig(yaml, "fuzz.yaml");
  if (!config.ok()) {
    fuzz::RequireRejectedAs(config.status(), absl::StatusCode::kInvalidArgument,
                            "a bad config is INVALID_ARGUMENT");
    return 0;
  }
  const std::string printed = ConfigToYaml(*config);
  absl::StatusOr<Config> again = ParseConfig(printed, "printed.yaml");
  if (!again.ok()) std::fprintf(stderr, "%s\n---\n%s\n", again.status().ToString().c_str(), printed.c_str());
  fuzz::Require(again.ok(), "ConfigToYaml's output parses");
  fuzz::Require(ConfigToYaml(*again) == printed, "ConfigToYaml(ParseConfig(printed)) == printed");
  return 0;
}
