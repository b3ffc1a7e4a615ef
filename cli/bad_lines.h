// The importers' report of skipped lines (sift data amazon, sift data events): a warning on stderr
// with the count and the first few, each as file:line: what.
#pragma once

#include <cstdio>
#include <string>

#include "common/data/line_scan.h"

namespace sift::cli {

inline void PrintBadLines(const data::FileReport& r) {
  if (r.bad_lines == 0) return;
  std::fprintf(stderr, "warning: %s: %lld bad line(s) skipped; the first %zu:\n", r.path.c_str(),
               static_cast<long long>(r.bad_lines), r.first_bad.size());
  for (const std::string& m : r.BadLineMessages()) std::fprintf(stderr, "  %s\n", m.c_str());
}

}  // namespace sift::cli
