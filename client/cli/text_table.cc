#include "text_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace turbokv::cli {

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  for (std::string &cell : cells) {
    // Control bytes as \xNN: a name another tenant registered cannot move the cursor or
    // recolour the terminal of whoever lists it.
    if (std::none_of(cell.begin(), cell.end(), [](char ch) {
          const auto u = static_cast<unsigned char>(ch);
          return u < 0x20 || u == 0x7f;
        })) {
      continue;
    }
    std::string shown;
    for (char ch : cell) {
      const auto u = static_cast<unsigned char>(ch);
      if (u < 0x20 || u == 0x7f) {
        absl::StrAppendFormat(&shown, "\\x%02x", u);
      } else {
        shown.push_back(ch);
      }
    }
    cell = std::move(shown);
  }
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].header.size();
    for (const auto &row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const auto &cell_of) {
    std::string l;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string &cell = cell_of(c);
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) l += "  ";
      absl::StrAppend(&l, columns_[c].align == Align::kRight ? pad : "", cell,
                      columns_[c].align == Align::kLeft ? pad : "");
    }
    l.erase(l.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, l, "\n");
  };
  line([&](size_t c) -> const std::string & { return columns_[c].header; });
  for (const auto &row : rows_) line([&](size_t c) -> const std::string & { return row[c]; });
  return out;
}

}  // namespace turbokv::cli
