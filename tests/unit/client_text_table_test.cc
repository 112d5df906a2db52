// The CLI's tables for people (`turbokv stats`, `ns list`): column widths,
// alignment, bytes.
#include <gtest/gtest.h>

#include "text_table.h"

namespace turbokv::cli {
namespace {

using Align = TextTable::Align;

TEST(TextTableTest, ColumnsAsWideAsTheirWidestCell) {
  TextTable t({{"NAMESPACE"}, {"TTL"}, {"BLOCKS", Align::kRight}, {"CODEC"}});
  t.AddRow({"0000000000000001", "3600 s", "7", "raw"});
  t.AddRow({"00000000000000ff", "never", "12345678", "K 4-bit g=32, V 4-bit g=32"});
  EXPECT_EQ(t.rows(), 2u);
  EXPECT_EQ(t.Render(),
            "NAMESPACE         TTL       BLOCKS  CODEC\n"
            "0000000000000001  3600 s         7  raw\n"
            "00000000000000ff  never   12345678  K 4-bit g=32, V 4-bit g=32\n");
}

TEST(TextTableTest, MissingCellsAreEmptyAndExtraOnesDropped) {
  TextTable t({{"A", Align::kRight}, {"B"}});
  t.AddRow({"1"});
  t.AddRow({"22", "x", "dropped"});
  EXPECT_EQ(t.Render(),
            " A  B\n"
            " 1\n"
            "22  x\n");
  EXPECT_EQ(TextTable({{"ONLY"}}).Render(), "ONLY\n");
}

TEST(TextTableTest, ControlBytesAreShownEscaped) {
  TextTable t({{"MODEL"}});
  t.AddRow({std::string("a\0b\x1b[31mc\x7f", 10)});
  EXPECT_EQ(t.Render(),
            "MODEL\n"
            "a\\x00b\\x1b[31mc\\x7f\n");
}

}  // namespace
}  // namespace turbokv::cli
