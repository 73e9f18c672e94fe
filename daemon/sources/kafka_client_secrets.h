// The secrets of one librdkafka client, and the steps that gather them and keep them out of
// what librdkafka says: resolving the configured properties, setting them on a conf, and the
// client's log lines. librdkafka redacts its sensitive properties in its own configuration
// dumps, but its messages quote values it refuses and paths it cannot open, and a property it
// does not know as sensitive may hold a secret.
//
// ClientSecrets is immutable once the client exists, so librdkafka's threads may read it
// concurrently; the functions are pure apart from reading the environment and files.
#pragma once

#include <librdkafka/rdkafka.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cdcview {

struct ClientSecrets {
  std::vector<std::string> values;

  // `text` with every secret replaced by kRedacted.
  std::string Redact(std::string_view text) const;
};

// `properties` with every ${env:...} / ${file:...} reference resolved (the loader checked
// them; a file may have gone since: INVALID_ARGUMENT naming `field`.properties.<name>). Adds
// the secrets among them to `secrets`: the values of the properties that IsSecretProperty and
// the resolved value of every reference, whatever its property's name.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ResolveProperties(
    const std::map<std::string, std::string>& properties, const std::string& field,
    ClientSecrets* secrets);

// Sets `name` on `conf`; INVALID_ARGUMENT naming the config field `field` on refusal, with
// librdkafka's reason redacted.
absl::Status SetConf(rd_kafka_conf_t* conf, const std::string& name, const std::string& value,
                     const std::string& field, const ClientSecrets& secrets);

// The log line for a librdkafka log callback from the client named `client`, redacted.
std::string KafkaLogLine(const char* client, const char* facility, const char* text,
                         const ClientSecrets& secrets);

}  // namespace cdcview
