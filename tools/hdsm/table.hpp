// Tables as the tool prints them: aligned plain text for the terminal, GitHub markdown for files.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::tool {

class Table {
 public:
  explicit Table(std::vector<std::string> header);

  void add_row(std::vector<std::string> cells);
  /// Right-align a column (numbers) in the text form.
  void align_right(std::size_t column);

  bool empty() const { return rows_.empty(); }

  /// Columns separated by two spaces, the header underlined; every line ends with '\n'.
  std::string text(std::string_view indent = "") const;
  /// A GitHub-flavoured markdown table ('|' in cells escaped).
  std::string markdown() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

/// Columns a string occupies on a terminal (UTF-8 code points; no wide characters expected).
std::size_t display_width(std::string_view text);

}  // namespace hdsm::tool
