// The Trainer's checkpoints: every rank writes the pieces of the state it owns (Engine::
// checkpoint_pieces) to a file of its own, rank 0 gathers their entries into the index and
// publishes the step; loading, every rank reads the pieces that overlap its shards. Each phase
// ends with the ranks agreeing, so a rank's failure stops all of them, none left waiting.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "merak/checkpoint/store.h"
#include "merak/runtime/engine_comm.h"
#include "merak/train/trainer.h"

namespace merak::train {
namespace {

using Clock = std::chrono::steady_clock;

// Every rank's `problem` (empty: none): the first is a SetupError on every rank.
void agree(comm::Communicator& host, const std::string& problem) {
  for (const std::string& p : runtime::all_gather_bytes(host, problem))
    if (!p.empty()) throw SetupError(p);
}

std::string join(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out;
}

Shape split_ints(const std::string& s) {
  Shape out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

// Entries travel to rank 0 as lines of tab-separated fields.
std::string encode(const std::vector<checkpoint::PieceEntry>& entries) {
  std::string out;
  for (const checkpoint::PieceEntry& e : entries)
    out += e.tensor + "\t" + dtype_name(e.dtype) + "\t" + join(e.global_shape) + "\t" +
           join(e.region.offset) + "\t" + join(e.region.shape) + "\t" +
           std::to_string(e.region.begin) + "\t" + std::to_string(e.region.flat_end()) + "\t" +
           e.file + "\t" + std::to_string(e.byte_begin) + "\t" + std::to_string(e.byte_end) +
           "\t" + std::to_string(e.checksum) + "\n";
  return out;
}

std::vector<checkpoint::PieceEntry> decode(const std::string& text) {
  std::vector<checkpoint::PieceEntry> out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string item;
    while (std::getline(fields, item, '\t')) f.push_back(item);
    MERAK_CHECK(f.size() == 11, "checkpoint: a malformed piece entry: ", line);
    checkpoint::PieceEntry e;
    e.tensor = f[0];
    e.dtype = dtype_from_name(f[1]);
    e.global_shape = split_ints(f[2]);
    e.region.offset = split_ints(f[3]);
    e.region.shape = split_ints(f[4]);
    e.region.begin = std::stoll(f[5]);
    e.region.end = std::stoll(f[6]);
    e.file = f[7];
    e.byte_begin = std::stoll(f[8]);
    e.byte_end = std::stoll(f[9]);
    e.checksum = std::stoull(f[10]);
    out.push_back(e);
  }
  return out;
}

}  // namespace

CheckpointSaved Trainer::save_checkpoint(const std::string& dir, int64_t keep) {
  comm::Communicator& host = grid_.host();
  const bool root = grid_.rank() == 0;
  const auto start = Clock::now();
  const std::string tmp = dir + "/." + checkpoint::step_name(steps_) + ".tmp";
  std::string problem;
  try {
    if (root) checkpoint::begin_step(dir, steps_);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(host, problem);

  std::vector<checkpoint::PieceEntry> mine;
  int64_t bytes = 0;
  try {
    const std::vector<checkpoint::Piece> pieces = engine_->checkpoint_pieces();
    if (!pieces.empty()) {
      char file[64];
      std::snprintf(file, sizeof file, "rank_%05d.safetensors", grid_.rank());
      mine = checkpoint::write_pieces(tmp, file, pieces);
    }
    for (const checkpoint::PieceEntry& e : mine) bytes += e.byte_end - e.byte_begin;
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(host, problem);

  const std::vector<std::string> all = runtime::all_gather_bytes(host, encode(mine));
  try {
    if (root) {
      std::vector<checkpoint::PieceEntry> entries;
      for (const std::string& text : all)
        for (const checkpoint::PieceEntry& e : decode(text)) entries.push_back(e);
      std::map<std::string, std::string> state = engine_->checkpoint_scalars();
      state["train.step"] = std::to_string(steps_);
      checkpoint::write_index(tmp, steps_, config::to_yaml(config_), state, entries);
      checkpoint::publish(dir, steps_);
      checkpoint::point_latest(dir, steps_);
      checkpoint::prune(dir, int(keep));
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(host, problem);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::vector<double> totals = runtime::all_gather_doubles(host, {double(bytes), seconds});
  CheckpointSaved saved;
  saved.step_dir = dir + "/" + checkpoint::step_name(steps_);
  for (size_t i = 0; i < totals.size(); i += 2) {
    saved.bytes += int64_t(totals[i]);
    saved.seconds = std::max(saved.seconds, totals[i + 1]);
  }
  return saved;
}

void Trainer::resume_from(const std::string& step_dir) {
  std::string problem;
  int64_t step = 0;
  try {
    const checkpoint::Index index = checkpoint::read_index(step_dir);
    engine_->load_checkpoint(index);
    step = index.step;
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(grid_.host(), problem);
  steps_ = step;
}

}  // namespace merak::train
