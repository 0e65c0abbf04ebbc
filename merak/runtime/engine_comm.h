// The engine's collectives beyond point to point: gradient sums in buckets, small f64 exchanges
// (loss, norm, timings) and byte blobs (trace spans), on any communicator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/core/tensor.h"

namespace merak::runtime {

// Contiguous tensors' elements one after another in a new flat tensor of their dtype, on their
// device (what a bucket or a ZeRO segment sends). All parts share one dtype and device.
Tensor pack_flat(const std::vector<Tensor>& parts);
// The reverse: `flat`'s elements back into `parts` (contiguous, in order), copied.
void unpack_flat(const Tensor& flat, const std::vector<Tensor>& parts);

// Sums `grads` (contiguous tensors of one dtype, on one device, updated in place) over the
// group. They are packed in order into buckets of about bucket_bytes; every bucket's all-reduce
// is posted before the first is waited for, so the transfers overlap the packing and unpacking.
void all_reduce_buckets(comm::Communicator& group, const std::vector<Tensor>& grads,
                        int64_t bucket_bytes);

// Every member's `mine` (same length on all), concatenated in member order. Exact: the values
// travel as their bits.
std::vector<double> all_gather_doubles(comm::Communicator& group, const std::vector<double>& mine);

// Every member's bytes, in member order (lengths may differ).
std::vector<std::string> all_gather_bytes(comm::Communicator& group, const std::string& mine);

// Every member's bytes on member `root`, in member order (lengths may differ); the others get
// an empty list, and hold no one's bytes but their own.
std::vector<std::string> gather_bytes(comm::Communicator& group, const std::string& mine,
                                      int root);

// Root's bytes on every member.
std::string broadcast_bytes(comm::Communicator& group, const std::string& bytes, int root);

}  // namespace merak::runtime
