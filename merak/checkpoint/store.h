// A checkpoint on disk, independent of the layout that wrote it:
//
//   DIR/step_000001000/index.json          format version, step, the config that wrote it, the
//                                           scalar state, and for every tensor its dtype, global
//                                           shape and pieces (file, region in the global tensor,
//                                           byte range in the file, checksum)
//   DIR/step_000001000/rank_00003.safetensors   one per writing rank (a valid safetensors file)
//   DIR/latest                              the name of the last complete step directory
//
// Saving is atomic: a step is written under DIR/.step_000001000.tmp, every file fsynced, the
// directory renamed into place, and only then `latest` replaced (written aside, fsynced, renamed).
// A kill at any moment leaves the previous step loadable and `latest` naming it.
//
// This layer moves bytes and checks them; which rank writes which piece, and gathering the
// pieces' entries to the one rank that writes the index, is the caller's (merak/train).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "merak/checkpoint/region.h"
#include "merak/core/tensor.h"

namespace merak::checkpoint {

// Bad or unusable checkpoint input (a checksum that fails, a missing tensor, another model's
// shapes, an unwritable directory): what() names the file, tensor or path.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A piece a rank writes: `values` (contiguous, on the host) are `region`'s elements of the global
// tensor `tensor`.
struct Piece {
  std::string tensor;
  Shape global_shape;
  Region region;
  Tensor values;
};

// Where a written piece is.
struct PieceEntry {
  std::string tensor;
  DType dtype = DType::F32;
  Shape global_shape;
  Region region;
  std::string file;             // in the step directory
  int64_t byte_begin = 0, byte_end = 0;  // in the file
  uint64_t checksum = 0;
};

struct TensorEntry {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<PieceEntry> pieces;
};

struct Index {
  int version = 1;
  int64_t step = 0;
  std::string config;                          // the YAML of the run that wrote it
  std::map<std::string, std::string> state;    // scalar state (counters, the loss scale, ...):
                                               // numbers, as text
  std::map<std::string, TensorEntry> tensors;  // by global name
  std::string dir;                             // the step directory it was read from
};

std::string step_name(int64_t step);  // "step_000001000"

// Creates checkpoint directory `dir` if missing, clears what interrupted saves left (as
// begin_step does), and writes (and removes) a probe file in it: a directory that cannot take a
// checkpoint is found before training, not at the first save. Called by one rank, with no save
// in flight.
void check_writable(const std::string& dir);

// Starts writing step `step` in checkpoint directory `dir` (created if missing; what interrupted
// saves of any step left is cleared: `.step_N.tmp` removed, `.step_N.old` renamed back to step N
// where a kill mid-swap left it the only copy, else removed): returns the temporary step
// directory. Called by one rank, with no other save in flight.
std::string begin_step(const std::string& dir, int64_t step);
// Writes `pieces` into `file` (a safetensors file) in the temporary step directory, fsynced, and
// returns their entries for the index.
std::vector<PieceEntry> write_pieces(const std::string& step_dir, const std::string& file,
                                     const std::vector<Piece>& pieces);
// Writes the index from every writer's entries (the same tensor's pieces from several files
// are merged; their dtypes and global shapes must agree, and they must hold each element once),
// fsynced.
void write_index(const std::string& step_dir, int64_t step, const std::string& config,
                 const std::map<std::string, std::string>& state,
                 const std::vector<PieceEntry>& entries);
// Moves the finished temporary directory into place (swapped with a copy of the same step in one
// rename, where the file system can), then points `latest` at it, then deletes the oldest
// complete steps beyond `keep` (0: keep all, and delete nothing), counting only steps up to the
// one `latest` names (later ones, of a run this one resumed before, are neither counted nor
// deleted).
void publish(const std::string& dir, int64_t step);
void point_latest(const std::string& dir, int64_t step);
void prune(const std::string& dir, int keep);

// The step directory `path` names: itself when it holds an index.json, else the one its
// `latest` names. Empty when `path` is a checkpoint directory with nothing saved yet (and
// `allow_empty`); a CheckpointError otherwise.
std::string resolve(const std::string& path, bool allow_empty = false);
// Reads and checks an index.json (its format, version, step, and every piece's region, bytes and
// checksum; no two pieces of a tensor may overlap).
Index read_index(const std::string& step_dir);

// The scalar state `key` of `index`, converted strictly: a count is a whole number >= 0 ("1e3"
// and "2.9" are not), a float one that f32 holds (finite, and not a nonzero that rounds to 0).
// Anything else, or no such key, is a CheckpointError naming DIR/index.json and the key.
int64_t state_count(const Index& index, const std::string& key);
float state_float(const Index& index, const std::string& key);

}  // namespace merak::checkpoint
