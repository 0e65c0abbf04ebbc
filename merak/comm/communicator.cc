#include "merak/comm/communicator.h"

#include <numeric>

#include "merak/comm/mpi_env.h"

namespace merak::comm {

namespace {

// "4,5" or, for large groups, "0,2,4,6,...,126 (64 ranks)".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  const size_t n = ranks.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 16 && i == 6) {
      s += ",..." + std::to_string(ranks.back()) + " (" + std::to_string(n) + " ranks)";
      break;
    }
    s += (i ? "," : "") + std::to_string(ranks[i]);
  }
  return s;
}

void keep_owner(std::vector<Tensor>& keep, const Buffer& b) {
  if (b.owner.defined()) keep.push_back(b.owner);
}

}  // namespace

Communicator::Communicator(MPI_Comm group, std::string name, CommOptions options)
    : name_(std::move(name)), options_(options) {
  set_timeout(options.timeout_s);
  MERAK_CHECK(options.mpi_max_count > 0, "communicator '", name_, "': mpi_max_count must be > 0");
  int size = 0;
  check_mpi(MPI_Comm_rank(group, &rank_), "communicator '" + name_ + "': MPI_Comm_rank");
  check_mpi(MPI_Comm_size(group, &size), "communicator '" + name_ + "': MPI_Comm_size");
  MPI_Group g, world;
  MPI_Comm_group(group, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> mine(size);
  std::iota(mine.begin(), mine.end(), 0);
  world_ranks_.resize(size);
  check_mpi(MPI_Group_translate_ranks(g, size, mine.data(), world, world_ranks_.data()),
            "communicator '" + name_ + "': MPI_Group_translate_ranks");
  MPI_Group_free(&g);
  MPI_Group_free(&world);
}

Communicator::Communicator(std::string name, CommOptions options)
    : name_(std::move(name)), world_ranks_{0}, options_(options) {
  set_timeout(options.timeout_s);
}

Communicator::Communicator(Wrapping, const Communicator& inner)
    : name_(inner.name_), rank_(inner.rank_), world_ranks_(inner.world_ranks_),
      options_(inner.options_) {}

void Communicator::set_timeout(double seconds) {
  MERAK_CHECK(seconds > 0, "communicator '", name_, "': timeout must be > 0 s, got ", seconds);
  options_.timeout_s = seconds;
}

std::string Communicator::describe() const {
  return detail::concat("group '", name_, "' (rank ", rank_, " of ", size(), ", world ranks ",
                        rank_list(world_ranks_), ")");
}

std::string Communicator::describe_peer(int peer) const {
  if (peer < 0 || peer >= size()) return detail::concat("peer ", peer);
  return detail::concat("peer ", peer, " (world rank ", world_ranks_[peer], ")");
}

std::string OpInfo::body(const Communicator& c) const {
  std::string s = op;
  if (!parts.empty()) {
    s += detail::concat(" of ", parts.size(), " p2p ops [");
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i].body(c);
    return s + "]";
  }
  if (reduce) s += detail::concat(" (", reduce, ")");
  if (count >= 0) s += detail::concat(" of ", count, " ", dtype_name(dtype));
  if (role) s += detail::concat(" ", role, " ", c.describe_peer(peer));
  if (tag >= 0) s += detail::concat(", tag ", tag);
  return s;
}

std::string OpInfo::str(const Communicator& c) const { return body(c) + " on " + c.describe(); }

void Communicator::check_buffer(const char* op, const Buffer& b) const {
  MERAK_CHECK(comm_dtype(b.dtype), op, " on ", describe(), ": dtype ", dtype_name(b.dtype),
              " is not supported (f32, bf16, f16, i32, i64)");
  MERAK_CHECK(b.device.type == memory(), op, " on ", describe(), ": buffer in ",
              b.device.str(), " memory, but the ", backend(), " backend needs ",
              memory() == DeviceType::CUDA ? "cuda" : "cpu", " memory");
}

void Communicator::check_peer(const char* op, int peer, const char* role) const {
  MERAK_CHECK(peer >= 0 && peer < size(), op, " on ", describe(), ": ", role, " ", peer,
              " is not a rank of the group (0..", size() - 1, ")");
}

void Communicator::check_counts(const char* op, const std::vector<int64_t>& counts,
                                int64_t mine, int64_t total, const char* mine_name,
                                const char* total_name) const {
  MERAK_CHECK(int(counts.size()) == size(), op, " on ", describe(), ": ", counts.size(),
              " counts for ", size(), " ranks");
  int64_t sum = 0;
  for (int64_t c : counts) {
    MERAK_CHECK(c >= 0, op, " on ", describe(), ": negative count ", c);
    sum += c;
  }
  MERAK_CHECK(counts[rank_] == mine, op, " on ", describe(), ": counts[", rank_, "] is ",
              counts[rank_], " but the ", mine_name, " has ", mine, " elements");
  MERAK_CHECK(sum == total, op, " on ", describe(), ": counts sum to ", sum, " but the ",
              total_name, " has ", total, " elements");
}

Work Communicator::make_work(std::unique_ptr<WorkImpl> impl, std::vector<Tensor> keep) const {
  return Work(std::move(impl), options_.timeout_s, std::move(keep));
}

Work Communicator::isend(const Buffer& b, int peer, int tag) {
  return ibatch({P2P{P2P::Send, b, peer, tag}});
}

Work Communicator::irecv(const Buffer& b, int peer, int tag) {
  return ibatch({P2P{P2P::Recv, b, peer, tag}});
}

Work Communicator::ibatch(const std::vector<P2P>& ops) {
  std::vector<Tensor> keep;
  for (const P2P& p : ops) {
    const char* op = p.kind == P2P::Send ? "send" : "recv";
    check_buffer(op, p.buffer);
    check_peer(op, p.peer, "peer");
    MERAK_CHECK(p.tag >= 0, op, " on ", describe(), ": negative tag ", p.tag);
    keep_owner(keep, p.buffer);
  }
  if (ops.empty()) return Work();
  return make_work(post_batch(ops), std::move(keep));
}

Communicator::SplitBatch Communicator::ibatch_split(const std::vector<P2P>& ops) {
  SplitBatch split;
  if (!matches_tags()) {
    split.receives = ibatch(ops);
    return split;
  }
  std::vector<P2P> receives, sends;
  for (const P2P& p : ops) (p.kind == P2P::Recv ? receives : sends).push_back(p);
  split.receives = ibatch(receives);
  split.sends = ibatch(sends);
  return split;
}

Work Communicator::iall_reduce(const Buffer& b, ReduceOp op) {
  check_buffer("all_reduce", b);
  std::vector<Tensor> keep;
  keep_owner(keep, b);
  return make_work(post_all_reduce(b, op), std::move(keep));
}

Work Communicator::iall_gather(const Buffer& in, const Buffer& out) {
  MERAK_CHECK(out.numel == in.numel * size(), "all_gather on ", describe(), ": output has ",
              out.numel, " elements, want ", size(), " x ", in.numel);
  return iall_gather(in, out, std::vector<int64_t>(size(), in.numel));
}

Work Communicator::iall_gather(const Buffer& in, const Buffer& out,
                               const std::vector<int64_t>& counts) {
  check_buffer("all_gather", in);
  check_buffer("all_gather", out);
  MERAK_CHECK(in.dtype == out.dtype, "all_gather on ", describe(), ": input ",
              dtype_name(in.dtype), ", output ", dtype_name(out.dtype));
  check_counts("all_gather", counts, in.numel, out.numel, "input", "output");
  std::vector<Tensor> keep;
  keep_owner(keep, in);
  keep_owner(keep, out);
  return make_work(post_all_gather(in, out, counts), std::move(keep));
}

Work Communicator::ireduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) {
  MERAK_CHECK(in.numel == out.numel * size(), "reduce_scatter on ", describe(), ": input has ",
              in.numel, " elements, want ", size(), " x ", out.numel);
  return ireduce_scatter(in, out, op, std::vector<int64_t>(size(), out.numel));
}

Work Communicator::ireduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op,
                                   const std::vector<int64_t>& counts) {
  check_buffer("reduce_scatter", in);
  check_buffer("reduce_scatter", out);
  MERAK_CHECK(in.dtype == out.dtype, "reduce_scatter on ", describe(), ": input ",
              dtype_name(in.dtype), ", output ", dtype_name(out.dtype));
  check_counts("reduce_scatter", counts, out.numel, in.numel, "output", "input");
  std::vector<Tensor> keep;
  keep_owner(keep, in);
  keep_owner(keep, out);
  return make_work(post_reduce_scatter(in, out, op, counts), std::move(keep));
}

Work Communicator::ibroadcast(const Buffer& b, int root) {
  check_buffer("broadcast", b);
  check_peer("broadcast", root, "root");
  std::vector<Tensor> keep;
  keep_owner(keep, b);
  return make_work(post_broadcast(b, root), std::move(keep));
}

std::string backend_name(const Communicator& c) {
  const std::string b = c.backend();
  if (b == "mpi") return "MPI";
  if (b == "nccl") return "NCCL";
  if (b == "mpi-staged") return "MPI staged through host memory";
  return b;
}

Work Communicator::ibarrier() { return make_work(post_barrier(), {}); }

}  // namespace merak::comm
