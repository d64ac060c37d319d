// A job for [[tiered.rule]] (run by rules_job.py under the shim in tiered mode, 16 MiB budget):
// one 4 MiB block from librule_allocator.so (a library rule pins it), one 6 MiB block (a size
// rule keeps it on the host), and six 4 MiB blocks of its own, then rounds that touch the
// library's block once and every other block after it, so that lru alone would evict the
// library's block every round. Prints the bases of the two ruled blocks, checks every byte.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "workload_support.h"

extern "C" CUresult rule_allocator_alloc(CUdeviceptr* block, std::size_t bytes);

namespace {

constexpr std::size_t kBlock = std::size_t{4} << 20;
constexpr std::size_t kHostBlock = std::size_t{6} << 20;
constexpr std::size_t kOwnBlocks = 6;
constexpr uint32_t kRounds = 4;

constexpr const char* kProgram = "rules_program";

#define CHECK(call) WORKLOAD_CHECK(call, 1)

struct Block {
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  uint32_t value = 0;
};

}  // namespace

int main() {
  CUcontext context = nullptr;
  CHECK(workload_support::open_device(&context, nullptr));

  Block library{.bytes = kBlock};
  CHECK(rule_allocator_alloc(&library.base, library.bytes));
  Block on_host{.bytes = kHostBlock};
  CHECK(cuMemAlloc(&on_host.base, on_host.bytes));
  std::vector<Block> own(kOwnBlocks, Block{.bytes = kBlock});
  for (Block& block : own) CHECK(cuMemAlloc(&block.base, block.bytes));
  std::printf("library block 0x%llx\nhost block 0x%llx\n",
              static_cast<unsigned long long>(library.base),
              static_cast<unsigned long long>(on_host.base));

  std::vector<Block*> all{&library, &on_host};  // in the order each round touches them
  for (Block& block : own) all.push_back(&block);
  for (uint32_t round = 0; round < kRounds; ++round) {
    for (uint32_t i = 0; i < all.size(); ++i) {
      Block& block = *all[i];
      block.value = round * 100 + i;
      CHECK(cuMemsetD32(block.base, block.value, block.bytes / sizeof(uint32_t)));
    }
  }
  CHECK(cuCtxSynchronize());

  std::vector<uint32_t> words(kHostBlock / sizeof(uint32_t));
  for (const Block* block : all) {
    CHECK(cuMemcpyDtoH(words.data(), block->base, block->bytes));
    for (std::size_t i = 0; i < block->bytes / sizeof(uint32_t); ++i) {
      if (words[i] != block->value) {
        std::fprintf(stderr, "rules_program: block 0x%llx word %zu holds %u, expected %u\n",
                     static_cast<unsigned long long>(block->base), i, words[i], block->value);
        return 3;
      }
    }
  }
  for (const Block* block : all) CHECK(cuMemFree(block->base));
  std::printf("rules_program: every byte checked\n");
  return 0;
}
