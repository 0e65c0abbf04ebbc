// A checkpoint being saved: the state already copied to host memory, this rank's file being
// written (by a thread in the background, or at once), its entries for the index to follow.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "merak/checkpoint/store.h"

namespace merak::train {

struct PendingCheckpoint {
  std::string dir, tmp;
  int64_t step = 0, keep = 0;
  std::chrono::steady_clock::time_point start;
  double blocked = 0;                            // seconds the step loop waited so far
  // The state copied to host memory: owned here, so that its memory is freed by the thread that
  // allocated it (the step loop's), after the writer is done with it.
  std::vector<checkpoint::Piece> pieces;
  std::map<std::string, std::string> scalars;    // taken with the pieces: the same step's
  std::string file;                              // this rank's, in `tmp`
  std::vector<checkpoint::PieceEntry> entries;   // this rank's, once written
  std::string problem;                           // what stopped the write, if anything
  std::thread writer;                            // background saves only
  std::atomic<bool> written{false};              // the writer is done (or failed)

  ~PendingCheckpoint() {
    if (writer.joinable()) writer.join();
  }
};

}  // namespace merak::train
