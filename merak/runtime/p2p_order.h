// A static proof that a step's pipeline messages cannot deadlock on a transport that matches
// messages by posting order (NCCL), in the batches the engine posts them in (schedule.h's p2p_batches).
//
// The model is the strictest a transport may be: each rank's batches run one after another (one
// communication stream), a batch finishes when every one of its sends and receives has met its
// partner, and a send and a receive meet only while both their batches are running (no
// buffering: a send waits for the receiver to post). Under MPI, which buffers and matches by tag,
// a program safe here is safe too.
//
// It checks two things:
//   order  on every directed channel (rank a -> rank b), the k-th message a sends is the k-th b
//          receives: the same micro-batch, direction and pipeline cut;
//   waits  running every rank's batches under the model above, every rank finishes; otherwise it
//          names the ranks left waiting and the cycle of waits between them.
#pragma once

#include <string>
#include <vector>

#include "merak/runtime/schedule.h"

namespace merak::runtime {

struct P2POrderResult {
  std::vector<std::string> order;  // channel mismatches, one line each
  std::vector<std::string> waits;  // a deadlock: each blocked rank, then the cycle
  int batches = 0;                 // batches posted over all ranks (for reports)

  bool ok() const { return order.empty() && waits.empty(); }
  std::string report() const;  // every problem, one line each; empty when ok()
};

// programs[r] is pipeline rank r's program; each rank runs `virtual_stages` chunks (model stage
// chunk * ranks + r). Never throws for a bad program: that is what it reports.
P2POrderResult check_p2p_order(const std::vector<Program>& programs, int virtual_stages = 1);

}  // namespace merak::runtime
