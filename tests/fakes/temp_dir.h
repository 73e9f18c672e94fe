// TempDir: a fresh directory under the test's temporary directory, removed with everything
// in it when the object goes. Not thread-safe; one per test.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace cdcview::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "cdcview-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp(" << pattern << ") failed";
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace cdcview::test
