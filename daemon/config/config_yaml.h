// ConfigToYaml: a Config written back as YAML, for `cdcviewd --print-config`.
//
// The output is the effective configuration (file, environment and flags merged) with every
// default spelled out, in the file's own schema: ParseConfig reads it back into an equal
// Config. Pure function; safe from any thread.
#pragma once

#include <string>

#include "daemon/config/config.h"

namespace cdcview {

std::string ConfigToYaml(const Config& config);

}  // namespace cdcview
