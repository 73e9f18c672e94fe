// TestPki: certificates for TLS tests, made in-process with OpenSSL's API (P-256 keys):
// a CA, server certificates it signs (SAN DNS:localhost, IP:127.0.0.1, the serial the test
// asks for), a client certificate it signs, and a second CA that signs nothing the server
// trusts. Files are PEM, written under a directory the test owns. Not thread-safe; one per
// test.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace cdcview::test {

struct OpenSslFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
  void operator()(X509* cert) const { X509_free(cert); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree>;
using CertPtr = std::unique_ptr<X509, OpenSslFree>;

class TestPki {
 public:
  struct Pair {
    std::string cert;  // path of the PEM certificate
    std::string key;   // path of the PEM private key
  };

  explicit TestPki(std::string directory) : directory_(std::move(directory)) {
    ca_key_ = NewKey();
    ca_cert_ = Sign("cdcview test CA", ca_key_.get(), 1, /*ca=*/true, "", nullptr, nullptr);
    ca_file_ = Write("ca.crt", ca_cert_.get());
    other_ca_key_ = NewKey();
    other_ca_cert_ =
        Sign("another CA", other_ca_key_.get(), 1, /*ca=*/true, "", nullptr, nullptr);
    other_ca_file_ = Write("other-ca.crt", other_ca_cert_.get());
  }

  const std::string& ca_file() const { return ca_file_; }
  const std::string& other_ca_file() const { return other_ca_file_; }

  // A server certificate of the CA with `serial`, files "<name>.crt" and "<name>.key".
  Pair Server(const std::string& name, long serial) {
    return Issue(name, "localhost", serial, "DNS:localhost,IP:127.0.0.1", ca_cert_.get(),
                 ca_key_.get());
  }
  // A client certificate (CN=cdcview-test-client) of the CA, or of the other CA.
  Pair Client(const std::string& name, bool other_ca = false) {
    return Issue(name, "cdcview-test-client", 7, "",
                 other_ca ? other_ca_cert_.get() : ca_cert_.get(),
                 other_ca ? other_ca_key_.get() : ca_key_.get());
  }

  static KeyPtr NewKey() { return KeyPtr(EVP_EC_gen("P-256")); }

 private:
  Pair Issue(const std::string& name, const std::string& common_name, long serial,
             const std::string& san, X509* issuer, EVP_PKEY* issuer_key) {
    KeyPtr key = NewKey();
    CertPtr cert = Sign(common_name, key.get(), serial, /*ca=*/false, san, issuer, issuer_key);
    Pair pair{Write(name + ".crt", cert.get()), directory_ + "/" + name + ".key"};
    FILE* out = fopen(pair.key.c_str(), "w");
    EXPECT_NE(out, nullptr) << pair.key;
    EXPECT_EQ(PEM_write_PrivateKey(out, key.get(), nullptr, nullptr, 0, nullptr, nullptr), 1);
    fclose(out);
    return pair;
  }

  // Self-signed when `issuer` is null.
  static CertPtr Sign(const std::string& common_name, EVP_PKEY* key, long serial, bool ca,
                      const std::string& san, X509* issuer, EVP_PKEY* issuer_key) {
    CertPtr cert(X509_new());
    X509_set_version(cert.get(), X509_VERSION_3);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 30L * 24 * 3600);
    X509_set_pubkey(cert.get(), key);
    X509_NAME* subject = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                               -1, 0);
    X509* signer = issuer != nullptr ? issuer : cert.get();
    X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, signer, cert.get(), nullptr, nullptr, 0);
    auto add = [&](int nid, const std::string& value) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
      EXPECT_NE(ext, nullptr) << value;
      X509_add_ext(cert.get(), ext, -1);
      X509_EXTENSION_free(ext);
    };
    add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
    add(NID_key_usage, ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
    if (!ca) add(NID_ext_key_usage, san.empty() ? "clientAuth" : "serverAuth");
    if (!san.empty()) add(NID_subject_alt_name, san);
    EXPECT_GT(X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()), 0);
    return cert;
  }

  std::string Write(const std::string& name, X509* cert) {
    std::string path = directory_ + "/" + name;
    FILE* out = fopen(path.c_str(), "w");
    EXPECT_NE(out, nullptr) << path;
    EXPECT_EQ(PEM_write_X509(out, cert), 1);
    fclose(out);
    return path;
  }

  std::string directory_;
  KeyPtr ca_key_;
  CertPtr ca_cert_;
  std::string ca_file_;
  KeyPtr other_ca_key_;
  CertPtr other_ca_cert_;
  std::string other_ca_file_;
};

}  // namespace cdcview::test
