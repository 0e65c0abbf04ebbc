#include "merak/core/pending.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace merak {
namespace {

std::mutex g_mu;
// The registry's size, read without the lock: every op checks its inputs, and almost always
// nothing is pending.
std::atomic<size_t> g_count{0};
std::map<const Storage*, PendingOp>& registry() {
  static std::map<const Storage*, PendingOp> ops;
  return ops;
}

const Storage* key(const Tensor& t) {
  return t.defined() && t.impl().storage ? t.impl().storage.get() : nullptr;
}

// Removes and returns the entry for `k` (empty ops when there is none).
PendingOp take(const Storage* k) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry().find(k);
  if (it == registry().end()) return {};
  PendingOp op = std::move(it->second);
  registry().erase(it);
  g_count = registry().size();
  return op;
}

}  // namespace

void mark_pending(const Tensor& t, PendingOp op) {
  const Storage* k = key(t);
  MERAK_CHECK(k != nullptr, "mark_pending: ", t.str(), " has no storage");
  MERAK_CHECK(op.test && op.wait, "mark_pending: the operation needs test and wait");
  std::lock_guard<std::mutex> lock(g_mu);
  MERAK_CHECK(registry().emplace(k, std::move(op)).second, "mark_pending: ", t.str(),
              " is already being written by another operation");
  g_count = registry().size();
}

bool is_pending(const Tensor& t) {
  if (g_count == 0) return false;
  const Storage* k = key(t);
  if (!k) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  return registry().count(k) > 0;
}

void wait_pending(const Tensor& t) {
  if (g_count == 0) return;
  const Storage* k = key(t);
  if (!k) return;
  PendingOp op = take(k);
  if (op.wait) op.wait();
}

void poll_pending() {
  if (g_count == 0) return;
  std::vector<const Storage*> keys;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const auto& [k, op] : registry()) keys.push_back(k);
  }
  for (const Storage* k : keys) {
    std::function<bool()> test;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = registry().find(k);
      if (it == registry().end()) continue;
      test = it->second.test;
    }
    if (test()) take(k);
  }
}

void wait_all_pending() {
  for (;;) {
    const Storage* k = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (registry().empty()) return;
      k = registry().begin()->first;
    }
    PendingOp op = take(k);
    if (op.wait) op.wait();
  }
}

size_t pending_count() { return g_count; }

}  // namespace merak
