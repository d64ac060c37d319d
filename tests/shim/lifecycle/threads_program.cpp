// Many threads at once under a budget (run with VRAMSPILL_DEVICE_BUDGET set, passed as argv[1]
// in MiB): 16 threads each ask for an eighth of the budget at once, then make 199 more
// allocation/free pairs of random page-multiple sizes, while other threads look driver
// functions up (cuGetProcAddress_v2, dlsym) and one samples the device's usage as the real
// driver sees it. The budget must never be exceeded, every refusal
// must be CUDA_ERROR_OUT_OF_MEMORY, lookups must keep answering with the hooks, and at the end
// everything is returned. Exits 0 when all of that held.
#include <atomic>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "program_support.h"

using vramspill::testing::kMiB;
using vramspill::testing::object_of;
using vramspill::testing::real_driver_function;

namespace {

constexpr int kAllocatingThreads = 16;
constexpr int kPairsPerThread = 200;
constexpr size_t kPage = 4096;

std::atomic<bool> failed{false};
void fail(const char* what, long long value) {
  std::fprintf(stderr, "failure: %s (%lld)\n", what, value);
  failed = true;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  const size_t budget = std::strtoull(argv[1], nullptr, 10) * kMiB;
  CHECK(vramspill::testing::shim_is_loaded());
  const CUcontext context = vramspill::testing::init_primary_context();

  using MemGetInfo = CUresult (*)(size_t*, size_t*);
  const auto real_get_info = real_driver_function<MemGetInfo>("cuMemGetInfo_v2");
  size_t real_free = 0, real_total = 0;
  CHECK_CU(real_get_info(&real_free, &real_total));
  const size_t baseline = real_total - real_free;  // what the driver held before the test
  CHECK(real_total > 4 * budget);                  // the driver itself never refuses
  size_t free = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&free, &total));
  CHECK(total == budget);
  CHECK(free == budget);

  void* const alloc_hook = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  CHECK(object_of(alloc_hook) == "libvramspill.so");
  void* const driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(driver != nullptr);

  std::atomic<bool> done{false};
  std::atomic<size_t> live{0};  // bytes the allocating threads hold, by their own count
  // Bytes whose free has started / returned. The ledger forgets an allocation before the driver
  // frees it (Note [Reservation protocol]), so the driver may briefly hold more than the budget,
  // by at most the frees in flight.
  std::atomic<size_t> freeing_started{0}, freeing_done{0};
  const auto free_one = [&](CUdeviceptr pointer, size_t bytes) {
    live.fetch_sub(bytes);
    freeing_started.fetch_add(bytes);
    if (cuMemFree(pointer) != CUDA_SUCCESS) fail("cuMemFree", static_cast<long long>(pointer));
    freeing_done.fetch_add(bytes);
  };
  std::atomic<long long> successes{0}, refusals{0}, samples{0}, lookups{0};
  long long over_budget_samples = 0;  // driver over the budget, explained by frees in flight
  size_t peak_seen = 0;

  std::vector<std::thread> threads;
  constexpr int kLookupThreads = 3;
  std::latch start(kAllocatingThreads + kLookupThreads + 1);  // everyone starts together
  std::latch all_asked(kAllocatingThreads);
  for (int t = 0; t < kAllocatingThreads; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(context) != CUDA_SUCCESS) return fail("cuCtxSetCurrent", t);
      std::mt19937_64 random(1234 + t);
      // 4 KiB to 8 MiB: 16 threads holding a few each overrun a 64 MiB budget often.
      std::uniform_int_distribution<size_t> pages(1, 2048);
      start.arrive_and_wait();
      std::vector<std::pair<CUdeviceptr, size_t>> held;
      const auto allocate = [&](size_t bytes) {
        CUdeviceptr pointer = 0;
        const CUresult result = cuMemAlloc(&pointer, bytes);
        if (result == CUDA_SUCCESS) {
          ++successes;
          if (live.fetch_add(bytes) + bytes > budget) fail("threads hold more than the budget", 0);
          held.emplace_back(pointer, bytes);
        } else if (result == CUDA_ERROR_OUT_OF_MEMORY) {
          ++refusals;
        } else {
          fail("cuMemAlloc returned", result);
        }
      };
      // First every thread asks for an eighth of the budget and holds it until all have asked:
      // at least half of them are refused, however the threads are scheduled (on a loaded
      // machine the random pairs below may never overlap enough to reach the budget).
      allocate(budget / 8);
      all_asked.arrive_and_wait();
      for (const auto& [p, b] : held) free_one(p, b);
      held.clear();
      for (int i = 1; i < kPairsPerThread; ++i) {
        allocate(pages(random) * kPage);
        // Free in a shuffled order, keeping up to three allocations at a time.
        if (held.size() > 3) {
          while (!held.empty()) {
            const size_t which = random() % held.size();
            const auto [p, b] = held[which];
            held.erase(held.begin() + static_cast<long>(which));
            free_one(p, b);
            if (random() % 2 == 0) break;
          }
        }
      }
      for (const auto& [p, b] : held) free_one(p, b);
    });
  }
  // Lookups, as runtimes and frameworks make them, racing the allocations.
  for (int t = 0; t < kLookupThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      while (!done) {
        void* function = nullptr;
        CUdriverProcAddressQueryResult status{};
        const char* name = t == 0 ? "cuMemAlloc" : "cuMemFree";
        if (cuGetProcAddress(name, &function, 12000, 0, &status) != CUDA_SUCCESS ||
            object_of(function) != "libvramspill.so")
          fail("cuGetProcAddress_v2 did not hand out the hook", t);
        if (dlsym(driver, t == 1 ? "cuMemFree_v2" : "cuMemAlloc_v2") == nullptr ||
            dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") != alloc_hook)
          fail("dlsym did not hand out the hook", t);
        if (object_of(dlsym(RTLD_DEFAULT, "malloc")).empty() || dlsym(RTLD_NEXT, "free") == nullptr)
          fail("dlsym of a C library function failed", t);
        ++lookups;
      }
    });
  }
  // The driver's own view: device memory in use never exceeds the budget.
  std::thread sampler([&] {
    if (cuCtxSetCurrent(context) != CUDA_SUCCESS) return fail("cuCtxSetCurrent", -1);
    start.arrive_and_wait();
    while (!done) {
      size_t f = 0, t = 0;
      const size_t done_before = freeing_done.load();
      if (real_get_info(&f, &t) != CUDA_SUCCESS) return fail("real cuMemGetInfo", -1);
      const size_t in_flight = freeing_started.load() - done_before;
      const size_t used = t - f - baseline;
      if (used > peak_seen) peak_seen = used;
      if (used > budget) ++over_budget_samples;
      if (used > budget + in_flight)
        fail("the driver holds more than the budget plus frees in flight (bytes)",
             static_cast<long long>(used));
      size_t hf = 0, ht = 0;
      if (cuMemGetInfo(&hf, &ht) != CUDA_SUCCESS || ht != budget || hf > ht)
        fail("cuMemGetInfo under the budget", static_cast<long long>(hf));
      ++samples;
    }
  });
  for (int t = 0; t < kAllocatingThreads; ++t) threads[static_cast<size_t>(t)].join();
  done = true;
  for (size_t t = kAllocatingThreads; t < threads.size(); ++t) threads[t].join();
  sampler.join();

  CHECK_CU(cuMemGetInfo(&free, &total));
  CHECK_CU(real_get_info(&real_free, &real_total));
  std::printf(
      "allocations %lld, refused %lld, lookups %lld, samples %lld (%lld over the budget "
      "by frees in flight), driver peak %zu KiB of %zu KiB; at the end free %zu of %zu, "
      "driver holds %zu above the baseline\n",
      successes.load(), refusals.load(), lookups.load(), samples.load(), over_budget_samples,
      peak_seen / 1024, budget / 1024, free, total, real_total - real_free - baseline);
  CHECK(!failed);
  CHECK(successes + refusals == kAllocatingThreads * kPairsPerThread);
  CHECK(refusals >= kAllocatingThreads / 2);  // the budget was in play
  CHECK(lookups > 0 && samples > 0);
  CHECK(free == total && total == budget);
  CHECK(real_total - real_free == baseline);
  return 0;
}
