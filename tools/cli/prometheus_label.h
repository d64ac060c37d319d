// A label value for Prometheus's text exposition format, from any bytes (Note [Prometheus label
// values]).
#pragma once

#include <string>
#include <string_view>

namespace vramspill::cli {

// Note [Prometheus label values]
// The exposition format escapes a backslash, a double quote and a newline in a label value, and
// Prometheus refuses a whole scrape with a label value that is not valid UTF-8. A job's command
// is whatever bytes its arguments held, cut to the stats segment's size, perhaps in the middle
// of a character: each byte that does not start a well-formed sequence becomes U+FFFD, as a
// UTF-8 decoder shows it.
std::string prometheus_label_value(std::string_view text);

}  // namespace vramspill::cli
