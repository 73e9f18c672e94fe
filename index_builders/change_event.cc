#include "index_builders/change_event.h"

namespace cdcview {

std::string_view ChangeKindName(ChangeEvent::Kind kind) {
  switch (kind) {
    case ChangeEvent::Kind::kInsert:
      return "INSERT";
    case ChangeEvent::Kind::kModify:
      return "MODIFY";
    case ChangeEvent::Kind::kRemove:
      return "REMOVE";
  }
  return "?";
}

int CompareSequenceNumbers(std::string_view a, std::string_view b) {
  while (!a.empty() && a.front() == '0') a.remove_prefix(1);
  while (!b.empty() && b.front() == '0') b.remove_prefix(1);
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

}  // namespace cdcview
