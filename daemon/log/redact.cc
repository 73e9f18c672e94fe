#include "daemon/log/redact.h"

#include <algorithm>

namespace cdcview {

std::string RedactSecrets(std::string_view text, std::vector<std::string_view> secrets) {
  std::erase_if(secrets, [](std::string_view s) { return s.empty(); });
  std::sort(secrets.begin(), secrets.end(),
            [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  std::string out(text);
  for (std::string_view secret : secrets) {
    for (size_t at = out.find(secret); at != std::string::npos;
         at = out.find(secret, at + kRedacted.size())) {
      out.replace(at, secret.size(), kRedacted);
    }
  }
  return out;
}

}  // namespace cdcview
