#include "table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace hdsm::tool {
namespace {

std::string escape_markdown_cell(const std::string& cell) {
  std::string out;
  out.reserve(cell.size());
  for (char c : cell) {
    if (c == '|') out += '\\';
    if (c == '\n') {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::size_t display_width(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // skip UTF-8 continuation bytes
  }));
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)), right_(header_.size(), false) {}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != header_.size())
    throw std::logic_error(
        fmt::format("table row has {} cells, the header {}", cells.size(), header_.size()));
  rows_.push_back(std::move(cells));
}

void Table::align_right(std::size_t column) { right_.at(column) = true; }

std::string Table::text(std::string_view indent) const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) {
    width[c] = display_width(header_[c]);
    for (const auto& row : rows_) width[c] = std::max(width[c], display_width(row[c]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text(indent);
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::size_t pad = width[c] - display_width(cells[c]);
      const bool last = c + 1 == cells.size();
      if (c > 0) text += "  ";
      if (right_[c]) text.append(pad, ' ');
      text += cells[c];
      if (!right_[c] && !last) text.append(pad, ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text;
    out += '\n';
  };
  line(header_);
  std::vector<std::string> rule;
  rule.reserve(width.size());
  for (std::size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string Table::markdown() const {
  std::string out = "|";
  for (const auto& h : header_) out += fmt::format(" {} |", escape_markdown_cell(h));
  out += "\n|";
  for (std::size_t c = 0; c < header_.size(); ++c) out += right_[c] ? " ---: |" : " --- |";
  out += '\n';
  for (const auto& row : rows_) {
    out += '|';
    for (const auto& cell : row) out += fmt::format(" {} |", escape_markdown_cell(cell));
    out += '\n';
  }
  return out;
}

}  // namespace hdsm::tool
