#include "config/options.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "util/sizes.h"

namespace vramspill {
namespace {

// Note [One options table]
// Each row says everything about one option; `store` is the only code that knows which Config
// field it fills. The table is constexpr so that it is built at compile time: the shim does no
// work when it is loaded (Note [Entering the shim] in hooks/shim_state.h), and reading the table
// needs no initialisation.
// Defaults are text parsed by the same code as environment values, so a default can never be
// something a user could not have written (a test parses every one).
// One row per option reads better than the one field per line clang-format would make of it.
// clang-format off
constexpr std::array<OptionSpec, 23> kOptions = {{
    {"device", "budget", OptionType::kSizeOrPercent, "100%",
     "Device memory the job may use: a size, or a percent of the GPU's total memory.",
     {},
     [](Config& c, const OptionValue& v) { c.device.budget = std::get<Budget>(v); }},
    {"device", "reserve", OptionType::kSize, "0",
     "Headroom kept free below the budget (for the CUDA context, library workspaces, other "
     "processes): the limit enforced is budget minus reserve, so an explicit budget with "
     "`reserve = 0` means exactly that many bytes.",
     {},
     [](Config& c, const OptionValue& v) { c.device.reserve_bytes = std::get<uint64_t>(v); }},
    {"spill", "mode", OptionType::kEnum, "auto",
     "Where an allocation over the limit (or one the driver refuses for want of memory) goes. "
     "`managed`: CUDA managed memory, advised per `managed_location`; needs a device with "
     "concurrent managed access. `host`: a block of the pinned host pool, mapped into the device "
     "at the same address. `auto`: `managed` where the device supports it, else `host`. `off`: "
     "the allocation fails with `CUDA_ERROR_OUT_OF_MEMORY`, as without vramspill. `tiered`: "
     "linear allocations of at least `tiered.min_size` live on 2 MiB granules that move between "
     "the device and the host as the job runs, at the same address (README, \"Tiered mode\"); "
     "on a device without host-located VMM memory, and for everything else, as `auto`. In every "
     "mode but `off`, a VMM handle (`cuMemCreate`) that does not fit becomes host-located VMM "
     "memory, the only place off the device a handle can be mapped (README, \"VMM handles\").",
     kSpillModeNames,
     [](Config& c, const OptionValue& v) {
       c.spill.mode = static_cast<SpillMode>(std::get<Choice>(v).index);
     }},
    {"spill", "min_size", OptionType::kSize, "0",
     "Allocations smaller than this never spill: over the limit they fail with "
     "`CUDA_ERROR_OUT_OF_MEMORY`. Raise it to keep small, hot buffers off the host.",
     {},
     [](Config& c, const OptionValue& v) { c.spill.min_size = std::get<uint64_t>(v); }},
    {"spill", "host_limit", OptionType::kHostSizeOrPercent, "50%",
     "Host memory one process's spilled allocations may take in all (pinned pool plus managed): "
     "a size, or a percent of the memory available to the job: the host's `MemAvailable` or, "
     "where less, what its memory cgroup (a container's limit, cgroup v1 or v2) leaves, "
     "re-read as the job runs. With a percent, pinned memory also stays under `RLIMIT_MEMLOCK` "
     "(`ulimit -l`); a size replaces both. Past it an allocation fails with "
     "`CUDA_ERROR_OUT_OF_MEMORY` rather than let the kernel's OOM killer take the job.",
     {},
     [](Config& c, const OptionValue& v) { c.spill.host_limit = std::get<Budget>(v); }},
    {"spill", "managed_location", OptionType::kEnum, "host",
     "Preferred location advised for managed spill memory. `host`: pages stay in host memory "
     "and the device reads them over the link (the device budget holds). `device`: pages move to "
     "the device while it has room (faster reuse, but that memory is outside the budget). "
     "`none`: no advice; the driver migrates pages on access.",
     kManagedLocationNames,
     [](Config& c, const OptionValue& v) {
       c.spill.managed_location = static_cast<ManagedLocation>(std::get<Choice>(v).index);
     }},
    {"spill", "managed_accessed_by", OptionType::kBool, "true",
     "Advise managed spill memory as accessed by the device, so that its pages stay mapped in "
     "the device's page tables wherever they live (no fault on each access).",
     {},
     [](Config& c, const OptionValue& v) { c.spill.managed_accessed_by = std::get<bool>(v); }},
    {"spill", "host_pool_step", OptionType::kSize, "256MiB",
     "The pinned host pool grows by this much at a time, ahead of need (pinning takes about "
     "0.35 s per GiB, so it is never done for one small allocation), and by at most a quarter of "
     "`host_limit`. An allocation larger than a quarter of it gets a pinned region of its own, "
     "pinned when it is made, so that large blocks never leave holes between smaller ones.",
     {},
     [](Config& c, const OptionValue& v) { c.spill.host_pool_step = std::get<uint64_t>(v); }},
    {"spill", "host_pool_keep", OptionType::kSize, "1GiB",
     "Idle pinned memory the pool keeps for later spills; idle regions beyond it are unpinned "
     "and returned to the system.",
     {},
     [](Config& c, const OptionValue& v) { c.spill.host_pool_keep = std::get<uint64_t>(v); }},
    {"tiered", "policy", OptionType::kEnum, "lru",
     "The eviction policy of `tiered` mode: which blocks leave the device when room is needed. "
     "`lru`: the least recently used, by the launches, copies and memsets that touched them. "
     "`lfu`: the least often used lately (a use counts half after 1024 launches); a block on the "
     "host is brought in once used twice lately. `largest`: the largest blocks, so that fewest "
     "move; a block over half the budget is never brought in. `fifo`: the first to arrive on the "
     "device, whatever their use (close to what CUDA unified memory does; for comparison). "
     "`learned`: finds the period of the job's launches (a training step) and, once the launches "
     "follow it, evicts what is needed again furthest ahead and reaches in place what "
     "would displace data needed sooner; until then and whenever the launches stop repeating, "
     "evicts as it would with a guess at the step (the longest distance at which launches came "
     "back), or as `lru` without one.",
     kTieredPolicyNames,
     [](Config& c, const OptionValue& v) {
       c.tiered.policy = std::string(kTieredPolicyNames[std::get<Choice>(v).index]);
     }},
    {"tiered", "min_size", OptionType::kSize, "1MiB",
     "In `tiered` mode, linear allocations (`cuMemAlloc`, `cuMemAllocPitch`) of at least this "
     "size are tiered; smaller ones go to the driver as in `auto` mode. Each tiered allocation "
     "takes whole 2 MiB granules, so below 1 MiB the rounding would cost more than it saves.",
     {},
     [](Config& c, const OptionValue& v) { c.tiered.min_size = std::get<uint64_t>(v); }},
    {"tiered", "keep", OptionType::kSize, "64MiB",
     "Idle granules `tiered` mode keeps, of each kind (device and host), for the next "
     "allocations; beyond it they go back to the driver. Kept device granules count against "
     "the device budget.",
     {},
     [](Config& c, const OptionValue& v) { c.tiered.keep = std::get<uint64_t>(v); }},
    {"tiered", "window", OptionType::kEnum, "safe",
     "What a move between device and host waits for before it remaps a block's granules. "
     "`safe`: every submission from every thread waits while the device's work drains, then the "
     "blocks move; correct whatever the program does. `tracked`: only the streams whose "
     "launches, copies and memsets used the moving blocks are waited for, and work queued on "
     "other streams keeps running. Unsafe if kernels reach a tiered block through a pointer "
     "kept in device memory (a table of pointers, a linked structure), which use tracking "
     "cannot see; graph launches whose nodes, and kernels whose arguments, cannot be read make "
     "the move wait for their streams as well.",
     kWindowModeNames,
     [](Config& c, const OptionValue& v) {
       c.tiered.window = static_cast<WindowMode>(std::get<Choice>(v).index);
     }},
    {"tiered", "stream_ordered", OptionType::kEnum, "arena",
     "Where `tiered` mode serves stream-ordered requests (`cuMemAllocAsync`, and "
     "`cuMemAllocFromPoolAsync` from pools on the device without exportable handles) of at "
     "least `min_size`. `arena`: each is a tiered block, with either `mover`, usable when its "
     "stream gets there, and one freed with `cuMemFreeAsync` serves the next request of its size "
     "at once on its own stream, and on others once its stream has reached the free; such "
     "blocks belong to no pool (pointer queries give no pool, pool attributes and "
     "`cuMemPoolTrimTo` do not see them). "
     "`pool`: the driver's pools serve them, and a request that finds the budget full gets room "
     "by evicting tiered blocks; a job whose memory is all stream-ordered then spills past the "
     "budget.",
     kStreamOrderedModeNames,
     [](Config& c, const OptionValue& v) {
       c.tiered.stream_ordered = static_cast<StreamOrderedMode>(std::get<Choice>(v).index);
     }},
    {"tiered", "mover", OptionType::kEnum, "remap",
     "What moves `tiered` mode's blocks between device and host. `remap`: each block is VMM "
     "memory whose 2 MiB granules are copied and remapped at the same address inside the remap "
     "window. `prefetch`: each block is one managed allocation that prefers the host and is "
     "accessed by its device, so what is not brought in is read over the link; the same policy "
     "decides, and a move is a `cuMemPrefetchAsync` on the shim's own stream, ordered after the "
     "block's last uses, which the launch that needs it waits for on the device: no remap, no "
     "window, no device-wide wait. Needs concurrent managed access (a device without it, or "
     "whose managed allocation fails, gets `remap`).",
     kTieredMoverNames,
     [](Config& c, const OptionValue& v) {
       c.tiered.mover = static_cast<TieredMover>(std::get<Choice>(v).index);
     }},
    {"tiered", "admission", OptionType::kEnum, "weighed",
     "Which promotions the `prefetch` mover makes when they would evict other blocks (the "
     "`remap` mover ignores it). `weighed`: only those whose block's recent uses, times its "
     "bytes, outweigh the victims' by the bytes the move crosses; a block used less is read in "
     "place over the link, so a loop over more than fits settles like `managed` mode instead "
     "of moving every block in and out. `always`: every promotion the policy asks for, as the "
     "remap mover makes them. `learned`, once locked on the job's step, is followed either way.",
     kTieredAdmissionNames,
     [](Config& c, const OptionValue& v) {
       c.tiered.admission = static_cast<TieredAdmission>(std::get<Choice>(v).index);
     }},
    {"report", "memory_info", OptionType::kEnum, "budget",
     "What `cuMemGetInfo` reports. `budget`: total is the limit, free is the limit minus the "
     "device bytes the job holds (frameworks that size themselves from it, such as vLLM's KV "
     "cache or JAX's preallocation, stay within the budget and do not spill). `physical`: the "
     "driver's own figures. `virtual`: total adds the host limit and free what is left of it "
     "(such frameworks then fill the spill tier on purpose; nothing is added with spilling "
     "off).",
     kMemoryInfoNames,
     [](Config& c, const OptionValue& v) {
       c.report.memory_info = static_cast<MemoryInfo>(std::get<Choice>(v).index);
     }},
    {"log", "level", OptionType::kEnum, "info",
     "Least severe message that is logged; `off` logs nothing.",
     kLogLevelNames,
     [](Config& c, const OptionValue& v) {
       c.log.level = static_cast<LogLevel>(std::get<Choice>(v).index);
     }},
    {"log", "file", OptionType::kPath, "",
     "Regular file the log is appended to (a pipe, a device or a directory is refused, "
     "with a warning, and the log goes to standard error); empty: standard error.",
     {},
     [](Config& c, const OptionValue& v) { c.log.file = std::get<std::string>(v); }},
    {"log", "summary", OptionType::kBool, "true",
     "Log one summary line when the program exits (unless the level is `off`).",
     {},
     [](Config& c, const OptionValue& v) { c.log.summary = std::get<bool>(v); }},
    {"log", "stats", OptionType::kBool, "true",
     "Publish the job's figures for `vramspill stat` in a file only its owner can read "
     "(`$XDG_RUNTIME_DIR/vramspill/` or `/tmp/vramspill-<uid>/`), removed at exit.",
     {},
     [](Config& c, const OptionValue& v) { c.log.stats = std::get<bool>(v); }},
    {"trace", "file", OptionType::kPath, "",
     "Regular file the job's memory events are written to, with their times, for `vramspill "
     "export`: every allocation and free (spilled and tiered ones included), requests over the "
     "budget, and tiered mode's evictions, promotions and the blocks each launch touches. `%p` "
     "is replaced by the process id. An existing file is replaced only if it is empty or an earlier "
     "vramspill trace; any other file is left as it is, and the job runs untraced. Empty: no "
     "trace.",
     {},
     [](Config& c, const OptionValue& v) { c.trace.file = std::get<std::string>(v); }},
    {"trace", "format", OptionType::kEnum, "text",
     "How the trace is written. `text`: one event a line, for grep and scripts. `binary`: the "
     "same events as compact records (`shim/telemetry/trace_binary_format.h`), in under half "
     "the bytes and less time per event, for long jobs with many launches in `tiered` mode. "
     "Both start with the same readable header, and every `vramspill` command that reads a "
     "trace reads either.",
     kTraceFormatNames,
     [](Config& c, const OptionValue& v) {
       c.trace.format = static_cast<TraceFormat>(std::get<Choice>(v).index);
     }},
}};
// clang-format on

constexpr std::array<std::string_view, 6> kSections = {"device", "spill", "tiered",
                                                       "report", "log",   "trace"};

// ASCII only, on purpose: <cctype> follows the program's locale, and in a Turkish one 'i' does
// not upper-case to 'I'.
char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string upper(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(), ascii_upper);
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(), ascii_lower);
  return out;
}

std::string join(std::span<const std::string_view> items, std::string_view separator,
                 std::string_view quote = "") {
  std::string out;
  for (std::string_view item : items) {
    if (!out.empty()) out += separator;
    out.append(quote).append(item).append(quote);
  }
  return out;
}

ParsedOption failure(std::string problem) { return {std::nullopt, std::move(problem)}; }
ParsedOption success(OptionValue value) { return {std::move(value), {}}; }

ParsedOption parse_size_or_percent(std::string_view text) {
  if (text.find('%') != std::string_view::npos) {
    const std::optional<double> fraction = parse_percent(text);
    if (!fraction) return failure("not a percent");
    if (*fraction <= 0 || *fraction > 1)
      return failure("a percent must be above 0 and at most 100");
    return success(Budget::fraction(*fraction));
  }
  const std::optional<uint64_t> bytes = parse_size(text);
  if (!bytes && parse_rate(text))  // Note [A size in bytes is whole] in util/sizes.cpp
    return failure("not a whole number of bytes (a share is a percent, like 90%)");
  if (!bytes) return failure("not a size");
  if (*bytes == 0) return failure("0 bytes allows nothing");
  return success(Budget::bytes(*bytes));
}

ParsedOption parse_bool(std::string_view text) {
  static constexpr std::array<std::string_view, 4> kTrue = {"true", "1", "yes", "on"};
  static constexpr std::array<std::string_view, 4> kFalse = {"false", "0", "no", "off"};
  const std::string word = lower(text);
  if (std::ranges::find(kTrue, word) != kTrue.end()) return success(true);
  if (std::ranges::find(kFalse, word) != kFalse.end()) return success(false);
  return failure("not a boolean");
}

ParsedOption parse_integer(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    return failure("not an integer");
  return success(value);
}

}  // namespace

std::span<const OptionSpec> options() { return kOptions; }

std::span<const std::string_view> option_sections() { return kSections; }

const OptionSpec* find_option(std::string_view section, std::string_view key) {
  for (const OptionSpec& option : kOptions)
    if (option.section == section && option.key == key) return &option;
  return nullptr;
}

std::string option_name(const OptionSpec& option) {
  return std::string(option.section) + "." + std::string(option.key);
}

std::string env_name(const OptionSpec& option) {
  return "VRAMSPILL_" + upper(option.section) + "_" + upper(option.key);
}

std::string expected_text(const OptionSpec& option) {
  switch (option.type) {
    case OptionType::kSize:
      return "a size in bytes, optionally with a unit: 123, 512MiB, 20GiB, 1.5GB";
    case OptionType::kSizeOrPercent:
      return "a size (123, 512MiB, 20GiB, 1.5GB) or a percent of the device's memory (90%)";
    case OptionType::kHostSizeOrPercent:
      return "a size (123, 512MiB, 20GiB, 1.5GB) or a percent of the host's available memory "
             "(50%)";
    case OptionType::kEnum:
      return "one of: " + join(option.choices, ", ");
    case OptionType::kBool:
      return "true or false";
    case OptionType::kPath:
      return "a file path";
    case OptionType::kInteger:
      return "an integer";
  }
  return "?";
}

ParsedOption parse_option_text(const OptionSpec& option, std::string_view text) {
  switch (option.type) {
    case OptionType::kSize: {
      const std::optional<uint64_t> bytes = parse_size(text);
      if (!bytes) return failure("not a size");
      return success(*bytes);
    }
    case OptionType::kSizeOrPercent:
    case OptionType::kHostSizeOrPercent:
      return parse_size_or_percent(text);
    case OptionType::kEnum: {
      const auto at = std::ranges::find(option.choices, text);
      if (at == option.choices.end()) return failure("not a valid choice");
      return success(Choice{static_cast<std::size_t>(at - option.choices.begin())});
    }
    case OptionType::kBool:
      return parse_bool(text);
    case OptionType::kPath:
      if (text.find('\0') != std::string_view::npos) return failure("a path cannot contain NUL");
      return success(std::string(text));
    case OptionType::kInteger:
      return parse_integer(text);
  }
  return failure("unknown option type");
}

std::string options_markdown_table() {
  std::string out =
      "| Key | Environment variable | Type | Default | Meaning |\n"
      "|---|---|---|---|---|\n";
  for (const OptionSpec& option : kOptions) {
    std::string type;
    switch (option.type) {
      case OptionType::kSize:
        type = "size";
        break;
      case OptionType::kSizeOrPercent:
      case OptionType::kHostSizeOrPercent:
        type = "size or percent";
        break;
      case OptionType::kEnum:
        type = "one of " + join(option.choices, ", ", "`");
        break;
      case OptionType::kBool:
        type = "bool";
        break;
      case OptionType::kPath:
        type = "path";
        break;
      case OptionType::kInteger:
        type = "integer";
        break;
    }
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict overlap in
    // `"literal" + std::string&&` (the rvalue operator+ that inserts at the front).
    out += "| `";
    out += option_name(option);
    out += "` | `";
    out += env_name(option);
    out += "` | ";
    out += type;
    out += " | ";
    if (option.default_text.empty()) {
      out += "empty";
    } else {
      out += '`';
      out += option.default_text;
      out += '`';
    }
    out += " | ";
    out += option.doc;
    out += " |\n";
  }
  return out;
}

}  // namespace vramspill
