// Secret references: a Kafka source's librdkafka property given as "${env:NAME}" (the value of
// the environment variable NAME) or "${file:PATH}" (the contents of the file PATH, trailing
// line breaks removed: a Kubernetes Secret mounted as a file, or one written with echo), so
// that a password or key never has to be written in the config file.
//
// The config keeps the reference as written: the loader resolves it once to check it (an error
// names the property and what to do), `--print-config` prints the reference, and the Kafka
// source resolves it again when it creates its clients (a rotated file is read at the next
// start). A property whose name says it holds a secret (IsSecretProperty) but is written in
// the file as a plain value is printed as <redacted>.
//
// Pure functions apart from reading the environment and files; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cdcview {

// True for the librdkafka properties that hold a secret: those librdkafka marks sensitive
// (sasl.password, ssl.key.password, ssl.keystore.password, ssl.key.pem, ssl_key (the C API's
// name), ssl.ca.pem, sasl.oauthbearer.config, sasl.oauthbearer.client.secret) and any
// property whose name contains "password", "secret", "passphrase" or "private.key" (any case),
// which catches librdkafka's newer ones such as sasl.oauthbearer.assertion.private.key.pem.
// A property of any name whose value is a reference is treated as a secret too (its resolved
// value is redacted from librdkafka's text): the user said so by keeping it out of the file.
bool IsSecretProperty(std::string_view name);

// True when `value` is written "${...}": a reference, valid or not.
bool IsSecretReference(std::string_view value);

// A file given by ${file:PATH} holds at most this much: a certificate bundle is far smaller,
// and the loader must not read a device or a log file whole.
inline constexpr size_t kMaxSecretFileBytes = 1 << 20;

// The value `value` stands for: the value itself when it is not a reference, else what the
// reference names. INVALID_ARGUMENT saying what is wrong and what to do (without the value):
// an unset or empty variable, a file that cannot be read, is not a regular file or is larger
// than kMaxSecretFileBytes, or a "${...}" that is neither form.
absl::StatusOr<std::string> ResolveSecretReference(std::string_view value);

}  // namespace cdcview
