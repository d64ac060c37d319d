// Tables of the objects a program holds handles to (graphs, executable graphs, events), keyed by
// address, which is also the handle. Every handle from the program is looked up in its table
// before use, so a stale or garbage handle is refused instead of followed.
#pragma once

#include <memory>
#include <unordered_map>

namespace simcuda {

template <typename Object>
using HandleTable = std::unordered_map<Object*, std::shared_ptr<Object>>;

// The live object `handle` names, or nullptr. The caller holds the table's lock.
template <typename Object, typename Handle>
std::shared_ptr<Object> find_handle(const HandleTable<Object>& table, Handle handle) {
  const auto found = table.find(reinterpret_cast<Object*>(handle));
  return found == table.end() ? nullptr : found->second;
}

}  // namespace simcuda
