#include "merak/runtime/engine_comm.h"

#include <cstring>

namespace merak::runtime {
namespace {

// Bytes as i64 words (the communicators carry no raw bytes), zero-padded to a whole word.
Tensor words_of(const std::string& bytes) {
  const int64_t n = (int64_t(bytes.size()) + 7) / 8;
  Tensor t = Tensor::zeros({n}, DType::I64);
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

Tensor pack_flat(const std::vector<Tensor>& parts) {
  const DType dtype = parts.empty() ? DType::F32 : parts[0].dtype();
  const Device device = parts.empty() ? Device::cpu() : parts[0].device();
  int64_t n = 0;
  for (const Tensor& t : parts) {
    MERAK_CHECK(t.dtype() == dtype && t.device() == device && t.is_contiguous(), "packing: ",
                "expected contiguous ", dtype_name(dtype), " tensors on ", device.str(), ", got ",
                t.str());
    n += t.numel();
  }
  Tensor flat = Tensor::empty({n}, dtype, device);
  int64_t at = 0;
  for (const Tensor& t : parts) {
    flat.narrow(0, at, t.numel()).copy_(t.view({t.numel()}));
    at += t.numel();
  }
  return flat;
}

void unpack_flat(const Tensor& flat, const std::vector<Tensor>& parts) {
  int64_t at = 0;
  for (const Tensor& t : parts) {
    MERAK_CHECK(t.is_contiguous() && t.dtype() == flat.dtype() && at + t.numel() <= flat.numel(),
                "unpacking ", flat.str(), ": part ", t.str(), " does not fit");
    t.view({t.numel()}).copy_(flat.narrow(0, at, t.numel()));
    at += t.numel();
  }
}

void all_reduce_buckets(comm::Communicator& group, const std::vector<Tensor>& grads,
                        int64_t bucket_bytes) {
  struct Bucket {
    std::vector<Tensor> members;
    Tensor flat;
    comm::Work work;
  };
  std::vector<Bucket> buckets;
  int64_t filled = 0;
  for (const Tensor& g : grads) {
    MERAK_CHECK(g.is_contiguous(), "gradient reduction: expected a contiguous gradient, got ",
                g.str());
    if (buckets.empty() || (filled > 0 && filled + g.nbytes() > bucket_bytes)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().members.push_back(g);
    filled += g.nbytes();
  }
  for (Bucket& b : buckets) {
    b.flat = pack_flat(b.members);
    b.work = group.iall_reduce(b.flat, comm::ReduceOp::Sum);
  }
  for (Bucket& b : buckets) {
    b.work.wait();
    unpack_flat(b.flat, b.members);
  }
}

std::vector<double> all_gather_doubles(comm::Communicator& group,
                                       const std::vector<double>& mine) {
  const int64_t n = int64_t(mine.size());
  Tensor in = Tensor::empty({n}, DType::I64);
  if (n > 0) std::memcpy(in.raw_data(), mine.data(), size_t(n) * sizeof(double));
  Tensor out = Tensor::empty({n * group.size()}, DType::I64);
  if (n > 0) group.all_gather(in, out);
  std::vector<double> all(size_t(n * group.size()));
  if (n > 0) std::memcpy(all.data(), out.raw_data(), all.size() * sizeof(double));
  return all;
}

std::vector<std::string> all_gather_bytes(comm::Communicator& group, const std::string& mine) {
  const std::vector<double> sizes = all_gather_doubles(group, {double(mine.size())});
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (double s : sizes) {
    counts.push_back((int64_t(s) + 7) / 8);
    total += counts.back();
  }
  Tensor out = Tensor::empty({total}, DType::I64);
  if (total > 0) group.all_gather(words_of(mine), out, counts);
  std::vector<std::string> all;
  const char* p = static_cast<const char*>(total > 0 ? out.raw_data() : nullptr);
  for (size_t i = 0; i < sizes.size(); ++i) {
    all.emplace_back(p, size_t(sizes[i]));
    p += counts[i] * 8;
  }
  return all;
}

std::vector<std::string> gather_bytes(comm::Communicator& group, const std::string& mine,
                                      int root) {
  // The sizes go everywhere (a number a member); the bytes only to the root, as messages.
  const std::vector<double> sizes = all_gather_doubles(group, {double(mine.size())});
  constexpr int kTag = 0;  // nothing else is in flight on the group during a collective
  if (group.rank() != root) {
    const Tensor words = words_of(mine);
    if (!mine.empty()) group.send(words, root, kTag);
    return {};
  }
  std::vector<Tensor> words(sizes.size());
  std::vector<comm::P2P> receives;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (int(i) == root || sizes[i] == 0) continue;
    words[i] = Tensor::empty({(int64_t(sizes[i]) + 7) / 8}, DType::I64);
    receives.push_back({comm::P2P::Recv, words[i], int(i), kTag});
  }
  if (!receives.empty()) group.batch(receives);
  std::vector<std::string> all(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i)
    if (int(i) == root)
      all[i] = mine;
    else if (words[i].defined())
      all[i].assign(static_cast<const char*>(words[i].raw_data()), size_t(sizes[i]));
  return all;
}

std::string broadcast_bytes(comm::Communicator& group, const std::string& bytes, int root) {
  Tensor size = Tensor::full({1}, double(bytes.size()), DType::I64);
  group.broadcast(size, root);
  const int64_t n = int64_t(size.item());
  Tensor words = group.rank() == root ? words_of(bytes) : Tensor::zeros({(n + 7) / 8}, DType::I64);
  if (n > 0) group.broadcast(words, root);
  return std::string(static_cast<const char*>(words.raw_data()), size_t(n));
}

}  // namespace merak::runtime
