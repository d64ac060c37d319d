// An NVTX injection library for tests (tests/shim/nvtx/CMakeLists.txt): what Nsight Systems
// would receive from the shim, one line per event appended to the file NVTX_RECORDER_EVENTS
// names:
//
//   vramspill domain                          (the shim created its domain)
//   vramspill push vramspill: remap window
//   vramspill mark vramspill: evict 2 granules (4.0 MiB) to the host payload=4194304
//   vramspill pop
//
// NVTX dlopens it when NVTX_INJECTION64_PATH names it, and calls InitializeInjectionNvtx2, which
// fills the core-v2 callback table (the domain functions) through the export table. Without the
// variable it refuses (returns 0), which NVTX treats as a tool that failed to attach.
#define NVTX_NO_IMPL
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct nvtxDomainRegistration_st {
  std::array<char, 64> name{};
};

namespace {

int g_events = -1;  // the file's descriptor, opened once by InitializeInjectionNvtx2
std::array<nvtxDomainRegistration_st, 16> g_domains{};
std::atomic<std::size_t> g_domain_count{0};
thread_local int t_depth = 0;

// One write(2) per line on an O_APPEND descriptor: lines of different threads never interleave.
// A line too long for the buffer is cut, and still ends the line.
void record(nvtxDomainHandle_t domain, const char* what, const nvtxEventAttributes_t* event) {
  const char* message = "";
  std::array<char, 32> payload{};
  if (event != nullptr) {
    message = event->messageType == NVTX_MESSAGE_TYPE_ASCII ? event->message.ascii : "(not ASCII)";
    if (event->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64) {
      std::snprintf(payload.data(), payload.size(), " payload=%" PRIu64,
                    static_cast<uint64_t>(event->payload.ullValue));
    }
  }
  std::array<char, 512> line{};
  const int written = std::snprintf(line.data(), line.size(), "%s %s%s%s%s\n",
                                    domain != nullptr ? domain->name.data() : "(default)", what,
                                    event != nullptr ? " " : "", message, payload.data());
  if (written < 0) std::abort();
  auto length = static_cast<std::size_t>(written);
  if (length >= line.size()) {
    length = line.size() - 1;
    line[length - 1] = '\n';
  }
  if (write(g_events, line.data(), length) < 0) std::abort();
}

nvtxDomainHandle_t domain_create(const char* name) {
  const std::size_t index = g_domain_count.fetch_add(1);
  if (index >= g_domains.size()) std::abort();
  nvtxDomainRegistration_st& domain = g_domains[index];
  std::snprintf(domain.name.data(), domain.name.size(), "%s", name);
  record(&domain, "domain", nullptr);
  return &domain;
}

void domain_mark(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* event) {
  record(domain, "mark", event);
}

int domain_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* event) {
  record(domain, "push", event);
  return t_depth++;
}

int domain_pop(nvtxDomainHandle_t domain) {
  // A pop with nothing pushed on this thread is recorded as such, for the test to reject.
  record(domain, t_depth == 0 ? "pop without push" : "pop", nullptr);
  return t_depth == 0 ? -1 : --t_depth;
}

template <typename Function>
bool attach(NvtxFunctionTable table, unsigned int size, unsigned int id, Function function) {
  // `size` is the highest valid id: NVTX's count leaves out slot 0 (the INVALID id).
  if (id > size || table[id] == nullptr) return false;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(function);
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const char* path = std::getenv("NVTX_RECORDER_EVENTS");
  if (path == nullptr || get_export_table == nullptr) return 0;
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) == 0 ||
      table == nullptr)
    return 0;
  g_events = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_events < 0) return 0;
  const bool attached = attach(table, size, NVTX_CBID_CORE2_DomainCreateA, &domain_create) &&
                        attach(table, size, NVTX_CBID_CORE2_DomainMarkEx, &domain_mark) &&
                        attach(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_push) &&
                        attach(table, size, NVTX_CBID_CORE2_DomainRangePop, &domain_pop);
  return attached ? 1 : 0;
}
