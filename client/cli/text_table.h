// Columns of text for people (`turbokv stats`, `ns list` without --json): a
// header row, then one row per item; each column as wide as its widest cell,
// columns two spaces apart, no trailing spaces. Widths count bytes, so a
// non-ASCII cell shifts the columns after it.
#ifndef TURBOKV_CLIENT_CLI_TEXT_TABLE_H_
#define TURBOKV_CLIENT_CLI_TEXT_TABLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace turbokv::cli {

class TextTable {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;  // kRight for numbers
  };

  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // One row; missing cells are empty, cells beyond the columns are dropped; control bytes
  // (below 0x20, and 0x7f) are shown as \xNN.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  // The header and the rows, each line ending in "\n".
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace turbokv::cli

#endif  // TURBOKV_CLIENT_CLI_TEXT_TABLE_H_
