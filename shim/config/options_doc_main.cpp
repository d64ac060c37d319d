// vramspill_options_doc: prints the options table as the Markdown table the README carries
// (the options_table_in_readme test compares the two; paste this output to update it).
#include <cstdio>
#include <string>

#include "config/options.h"

int main() {
  const std::string table = vramspill::options_markdown_table();
  return std::fputs(table.c_str(), stdout) < 0 ? 1 : 0;
}
