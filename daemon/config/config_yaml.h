// ConfigToYaml: a Config written back as YAML, for `cdcviewd --print-config`.
//
// The output is the effective configuration (file, environment and flags merged) with every
// default spelled out, in the file's own schema: ParseConfig reads it back into an equal
// Config, but for a secret written in the file as a plain value (a Kafka property that
// IsSecretProperty), which is printed as <redacted>; a reference to one (${env:NAME},
// ${file:PATH}) is printed as written. Pure function; safe from any thread.
#pragma once

#include <string>

#include "daemon/config/config.h"

namespace cdcview {

std::string ConfigToYaml(const Config& config);

}  // namespace cdcview
