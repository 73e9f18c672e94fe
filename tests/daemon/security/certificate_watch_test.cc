#include "daemon/security/certificate_watch.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/test_pki.h"

namespace cdcview::security {
namespace {

using ::testing::StartsWith;

TEST(CertificateWatchTest, AnEncryptedKeyFailsNamingTheFileInsteadOfAskingForAPassphrase) {
  test::TempDir dir;
  test::TestPki pki(dir.path());
  test::TestPki::Pair pair = pki.Server("server", 1);
  // The same key, written again encrypted with a passphrase.
  FILE* in = fopen(pair.key.c_str(), "r");
  ASSERT_NE(in, nullptr);
  test::KeyPtr key(PEM_read_PrivateKey(in, nullptr, nullptr, nullptr));
  fclose(in);
  ASSERT_NE(key, nullptr);
  const std::string encrypted = dir.Sub("encrypted.key");
  FILE* out = fopen(encrypted.c_str(), "w");
  ASSERT_NE(out, nullptr);
  static char passphrase[] = "a passphrase";
  ASSERT_EQ(PEM_write_PrivateKey(out, key.get(), EVP_aes_256_cbc(),
                                 reinterpret_cast<unsigned char*>(passphrase),
                                 sizeof passphrase - 1, nullptr, nullptr),
            1);
  fclose(out);

  auto watch = CertificateWatch::Start(pair.cert, encrypted, nullptr, "grpc");
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(watch.status().message()),
              StartsWith("server.tls_key_file " + encrypted +
                         ": not an unencrypted PEM private key ("));
}

}  // namespace
}  // namespace cdcview::security
