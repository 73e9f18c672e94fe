#include "daemon/log/redact.h"

#include <gtest/gtest.h>

namespace cdcview {
namespace {

TEST(RedactSecretsTest, ReplacesEveryOccurrenceOfEverySecret) {
  EXPECT_EQ(RedactSecrets("user alice password hunter2, again hunter2; token t0k3n",
                          {"hunter2", "t0k3n"}),
            "user alice password <redacted>, again <redacted>; token <redacted>");
}

TEST(RedactSecretsTest, TakesALongerSecretOutWholeBeforeOneItContains) {
  // "abc" first would leave "<redacted>def" behind, which still tells half the longer one.
  EXPECT_EQ(RedactSecrets("key abcdef", {"abc", "abcdef"}), "key <redacted>");
}

TEST(RedactSecretsTest, EmptySecretsAndTextWithoutThemChangeNothing) {
  EXPECT_EQ(RedactSecrets("nothing to hide", {"", "absent"}), "nothing to hide");
  EXPECT_EQ(RedactSecrets("", {"x"}), "");
}

TEST(RedactSecretsTest, ASecretThatLooksLikeTheMarkerDoesNotLoop) {
  EXPECT_EQ(RedactSecrets("a <redacted> b", {"<redacted>"}), "a <redacted> b");
  EXPECT_EQ(RedactSecrets("rrr", {"r"}), "<redacted><redacted><redacted>");
}

}  // namespace
}  // namespace cdcview
