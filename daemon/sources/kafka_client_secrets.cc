#include "daemon/sources/kafka_client_secrets.h"

#include "absl/strings/str_cat.h"
#include "daemon/config/secret_reference.h"
#include "daemon/log/redact.h"

namespace cdcview {

std::string ClientSecrets::Redact(std::string_view text) const {
  return RedactSecrets(text, {values.begin(), values.end()});
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ResolveProperties(
    const std::map<std::string, std::string>& properties, const std::string& field,
    ClientSecrets* secrets) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : properties) {
    absl::StatusOr<std::string> resolved = ResolveSecretReference(value);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".properties.", name, ": ", resolved.status().message()));
    }
    if (IsSecretProperty(name) || IsSecretReference(value)) secrets->values.push_back(*resolved);
    out.emplace_back(name, *std::move(resolved));
  }
  return out;
}

absl::Status SetConf(rd_kafka_conf_t* conf, const std::string& name, const std::string& value,
                     const std::string& field, const ClientSecrets& secrets) {
  char error[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), error, sizeof error) !=
      RD_KAFKA_CONF_OK) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", secrets.Redact(error)));
  }
  return absl::OkStatus();
}

std::string KafkaLogLine(const char* client, const char* facility, const char* text,
                         const ClientSecrets& secrets) {
  return secrets.Redact(absl::StrCat("librdkafka ", client, " ", facility, ": ", text));
}

}  // namespace cdcview
