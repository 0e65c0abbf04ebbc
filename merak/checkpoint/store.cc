#include "merak/checkpoint/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "merak/checkpoint/checksum.h"
#include "merak/checkpoint/file_writer.h"
#include "merak/core/json.h"

namespace merak::checkpoint {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) { throw CheckpointError(what); }

constexpr int64_t kPieceAlignment = kSpanAlignment;  // where pieces start in a file: a page

std::string os_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// A file written with plain POSIX calls, so that a full disk or a missing permission is an error
// naming the path rather than a stream quietly gone bad.
class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(os_error("cannot create", path));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min(n, kFlushBytes));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(os_error("cannot write", path_));
      p += w;
      n -= size_t(w);
      written_ += w;
      // Start the disk on what is written while the next part is copied in: the final fsync
      // then waits for the tail only, and the save runs at the disk's pace, not copy + disk.
      if (written_ - flushed_ >= int64_t(kFlushBytes)) {
        ::sync_file_range(fd_, flushed_, written_ - flushed_, SYNC_FILE_RANGE_WRITE);
        flushed_ = written_;
      }
    }
  }
  void sync_and_close() {
    if (::fsync(fd_) != 0) fail(os_error("cannot fsync", path_));
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail(os_error("cannot close", path_));
    }
    fd_ = -1;
  }

 private:
  static constexpr size_t kFlushBytes = size_t(32) << 20;
  std::string path_;
  int fd_ = -1;
  int64_t written_ = 0, flushed_ = 0;
};

void sync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(os_error("cannot open directory", path));
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) fail(os_error("cannot fsync directory", path));
}

void rename_or_fail(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    fail(os_error("cannot rename '" + from + "' to", to));
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
    default: break;
  }
  MERAK_FAIL("checkpoint: no safetensors dtype for ", dtype_name(t));
}

std::string int_list(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Shape int_list(const JsonValue& n, const std::string& what) {
  Shape s;
  for (const JsonValue& v : n.array(what)) s.push_back(v.int64(what));
  return s;
}

// An object of the index whose keys are each given once (JSON allows a repeat, and readers
// differ on which one counts; an index we wrote never has one).
const JsonValue& unique_keys(const JsonValue& object, const std::string& what) {
  std::set<std::string> seen;
  for (const auto& member : object.members(what))
    if (!seen.insert(member.first).second)
      throw JsonError(what + ": key '" + member.first + "' is given twice");
  return object;
}

std::string latest_path(const std::string& dir) { return dir + "/latest"; }

// Whether `name` names an entry of a directory itself (a step in a checkpoint directory, a file
// in a step), not a path that leads elsewhere.
bool entry_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// Why two of a tensor's pieces overlap, naming them; empty when none do. Counting the pieces'
// elements tells whether they cover the tensor only when no two overlap: otherwise an element
// held twice makes up for one held nowhere. Pieces of a layout lie in boxes that are the same
// box or apart (a rank's shard, or a box of a fused one), as runs of its elements.
std::string overlapping(const std::string& tensor, std::vector<const PieceEntry*> pieces) {
  auto problem = [&](const PieceEntry& a, const PieceEntry& b, const char* what) {
    return "tensor '" + tensor + "': its pieces " + a.region.str() + " in " + a.file + " and " +
           b.region.str() + " in " + b.file + " " + what;
  };
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(),
                              [](const PieceEntry* p) { return p->region.numel() == 0; }),
               pieces.end());
  std::sort(pieces.begin(), pieces.end(), [](const PieceEntry* a, const PieceEntry* b) {
    return std::tie(a->region.offset, a->region.shape, a->region.begin) <
           std::tie(b->region.offset, b->region.shape, b->region.begin);
  });
  // The pieces of one box are runs of its elements (ZeRO-1's, or the whole box): sorted by their
  // start, each begins at or after the end of every one before it.
  std::vector<std::pair<size_t, size_t>> boxes;  // each box's pieces: [first, last)
  const PieceEntry* reach = nullptr;             // of the box's pieces so far, the one ending last
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Region& r = pieces[i]->region;
    if (i == 0 || r.offset != pieces[i - 1]->region.offset ||
        r.shape != pieces[i - 1]->region.shape) {
      boxes.push_back({i, i});
      reach = nullptr;
    } else if (r.begin < reach->region.flat_end()) {
      return problem(*reach, *pieces[i], "overlap");
    }
    boxes.back().second = i + 1;
    if (!reach || r.flat_end() > reach->region.flat_end()) reach = pieces[i];
  }
  // Different boxes must be apart. Sorted by offset, a sweep along the first dimension compares
  // each box with the earlier ones whose rows reach it only.
  std::vector<size_t> open;
  for (size_t b = 0; b < boxes.size(); ++b) {
    const Region& box = pieces[boxes[b].first]->region;
    if (box.shape.empty()) break;  // a scalar's pieces share its one box
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](size_t o) {
                                const Region& x = pieces[boxes[o].first]->region;
                                return x.offset[0] + x.shape[0] <= box.offset[0];
                              }),
               open.end());
    for (size_t o : open) {
      const Region& x = pieces[boxes[o].first]->region;
      bool meet = true;
      for (size_t d = 1; d < box.shape.size() && meet; ++d)
        meet = x.offset[d] < box.offset[d] + box.shape[d] &&
               box.offset[d] < x.offset[d] + x.shape[d];
      if (meet)
        return problem(*pieces[boxes[o].first], *pieces[boxes[b].first], "lie in boxes that meet");
    }
    open.push_back(b);
  }
  return "";
}

// Whether `text` is a number as the scalar state holds them: an integer that int64 holds, or a
// finite decimal float ("%.9g"). Checked when the index is read, so that a bad one is an error
// naming the file and the key, not a conversion's where the state is used.
bool is_number(const std::string& text) {
  // Shape -?D+(.D*)?([eE][-+]?D+)?, scanned by hand: std::regex recurses per character and a
  // long string overflows the stack.
  size_t at = 0;
  auto digits = [&] {
    const size_t from = at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) ++at;
    return at > from;
  };
  if (at < text.size() && text[at] == '-') ++at;
  if (!digits()) return false;
  if (at < text.size() && text[at] == '.') {
    ++at;
    digits();
  }
  if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
    ++at;
    if (at < text.size() && (text[at] == '+' || text[at] == '-')) ++at;
    if (!digits()) return false;
  }
  if (at != text.size()) return false;
  if (text.find_first_of(".eE") != std::string::npos)
    return std::isfinite(std::strtod(text.c_str(), nullptr));  // a tiny one rounds, and is fine
  errno = 0;
  std::strtoll(text.c_str(), nullptr, 10);
  return errno != ERANGE;
}

// The complete step directories of `dir`, by step.
std::map<int64_t, std::string> steps_in(const std::string& dir) {
  std::map<int64_t, std::string> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    long long step = 0;
    char tail = 0;
    if (e.is_directory() && std::sscanf(name.c_str(), "step_%lld%c", &step, &tail) == 1 &&
        fs::exists(e.path() / "index.json"))
      out[step] = name;
  }
  return out;
}

// Removes what interrupted saves left: `.step_N.tmp` (killed while writing) and `.step_N.old`
// (killed while swapping on a file system without RENAME_EXCHANGE). Only one save is ever in
// flight and this runs as it begins, so none of them is in use; of a large model each may hold
// hundreds of GB, and a step that is never saved again would otherwise keep its leftovers.
void discard_unfinished(const std::string& dir) {
  std::error_code ec;
  std::vector<std::pair<fs::path, long long>> stale, old;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    long long step = 0;
    int end = 0;
    if (std::sscanf(name.c_str(), ".step_%lld.%n", &step, &end) != 1 || end <= 0) continue;
    if (name.compare(size_t(end), std::string::npos, "tmp") == 0) stale.push_back({e.path(), step});
    if (name.compare(size_t(end), std::string::npos, "old") == 0) old.push_back({e.path(), step});
  }
  // A kill between publish's two renames (no RENAME_EXCHANGE) leaves step N only as
  // .step_N.old, complete and perhaps the step `latest` names: it goes back to its name.
  for (const auto& [path, step] : old) {
    const std::string named = dir + "/" + step_name(step);
    if (!fs::exists(named) && fs::exists(path / "index.json")) {
      rename_or_fail(path.string(), named);
      sync_dir(dir);
    } else {
      stale.push_back({path, step});
    }
  }
  for (const auto& [path, step] : stale) fs::remove_all(path, ec);
}

// Creates checkpoint directory `dir` if missing and clears what interrupted saves left: after a
// full disk, that holds the room the next write needs.
void prepare_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create checkpoint directory '" + dir + "': " + ec.message());
  discard_unfinished(dir);
}

}  // namespace

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%09lld", static_cast<long long>(step));
  return buf;
}

void check_writable(const std::string& dir) {
  prepare_dir(dir);
  std::error_code ec;
  const std::string probe = dir + "/.write_probe";
  try {
    OutFile out(probe);
    out.write("ok\n", 3);
    out.sync_and_close();
  } catch (...) {
    fs::remove(probe, ec);
    throw;
  }
  fs::remove(probe, ec);
}

std::string begin_step(const std::string& dir, int64_t step) {
  prepare_dir(dir);
  std::error_code ec;
  const std::string tmp = dir + "/." + step_name(step) + ".tmp";
  if (!fs::create_directory(tmp, ec) || ec)
    fail("cannot create '" + tmp + "': " + (ec ? ec.message() : std::string("exists")));
  return tmp;
}

std::vector<PieceEntry> write_pieces(const std::string& step_dir, const std::string& file,
                                     const std::vector<Piece>& pieces) {
  // A safetensors header naming each piece "<tensor>@<k>" as a flat run of its elements. Every
  // piece starts on a kPieceAlignment boundary of the file, as the tensors it is read back into
  // start on a page, so a resume can read it with direct I/O (no page-cache copy): the header is
  // padded with spaces, the gaps between pieces are U8 tensors "__pad@<k>" of zeros (safetensors
  // wants the data section covered without holes).
  std::string header = "{";
  int64_t data = 0;
  std::vector<int64_t> begin, pad;
  auto add = [&](const std::string& name, const std::string& dtype, int64_t numel,
                 int64_t bytes) {
    header += std::string(header.size() > 1 ? ", " : "") + json_quote(name) +
              ": {\"dtype\": \"" + dtype + "\", \"shape\": [" + std::to_string(numel) +
              "], \"data_offsets\": [" + std::to_string(data) + ", " +
              std::to_string(data + bytes) + "]}";
    data += bytes;
  };
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    MERAK_CHECK(p.values.defined() && p.values.device().is_cpu() && p.values.is_contiguous() &&
                    p.values.numel() == p.region.numel(),
                "checkpoint piece of '", p.tensor, "' ", p.region.str(), ": values ",
                p.values.str(), " are not its ", p.region.numel(), " elements on the host");
    std::string why;
    MERAK_CHECK(region_fits(p.region, p.global_shape, &why), "checkpoint piece of '", p.tensor,
                "': ", why);
    pad.push_back((kPieceAlignment - data % kPieceAlignment) % kPieceAlignment);
    if (pad.back() > 0) add("__pad@" + std::to_string(k), "U8", pad.back(), pad.back());
    begin.push_back(data);
    add(p.tensor + "@" + std::to_string(k), safetensors_dtype(p.values.dtype()),
        p.values.numel(), p.values.nbytes());
  }
  header += std::string(pieces.empty() ? "" : ", ") +
            "\"__metadata__\": {\"format\": \"merak-checkpoint-pieces\"}}";
  while ((8 + header.size()) % kPieceAlignment != 0) header += ' ';
  const uint64_t header_len = header.size();
  const int64_t base = 8 + int64_t(header_len);

  // The header's 8 length bytes and text fill whole pages (padded above), then each piece at
  // its place; the gaps are the zero pads.
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char((header_len >> (8 * i)) & 0xff);
  head += header;
  std::vector<FileSpan> spans = {{0, head.data(), head.size()}};
  for (size_t k = 0; k < pieces.size(); ++k)
    spans.push_back({base + begin[k], pieces[k].values.raw_data(),
                     size_t(pieces[k].values.nbytes())});
  const std::vector<uint64_t> sums = write_file(step_dir + "/" + file, base + data, spans);
  std::vector<PieceEntry> entries;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    PieceEntry e;
    e.tensor = p.tensor;
    e.dtype = p.values.dtype();
    e.global_shape = p.global_shape;
    e.region = p.region;
    e.file = file;
    e.byte_begin = base + begin[k];
    e.byte_end = e.byte_begin + p.values.nbytes();
    e.checksum = sums[k + 1];
    entries.push_back(e);
  }
  return entries;
}

void write_index(const std::string& step_dir, int64_t step, const std::string& config,
                 const std::map<std::string, std::string>& state,
                 const std::vector<PieceEntry>& entries) {
  std::map<std::string, std::vector<const PieceEntry*>> by_tensor;
  for (const PieceEntry& e : entries) {
    auto& list = by_tensor[e.tensor];
    if (!list.empty()) {
      const PieceEntry& first = *list.front();
      MERAK_CHECK(first.dtype == e.dtype && first.global_shape == e.global_shape,
                  "checkpoint: tensor '", e.tensor, "' is ", dtype_name(first.dtype), " ",
                  shape_str(first.global_shape), " in ", first.file, " but ", dtype_name(e.dtype),
                  " ", shape_str(e.global_shape), " in ", e.file);
    }
    list.push_back(&e);
  }
  std::string j = "{\n  \"format\": \"merak-checkpoint\",\n  \"version\": 1,\n  \"step\": " +
                  std::to_string(step) + ",\n  \"config\": " + json_quote(config) +
                  ",\n  \"state\": {";
  bool first = true;
  for (const auto& [k, v] : state) {
    MERAK_CHECK(is_number(v), "checkpoint: state '", k, "' is '", v, "', not a number");
    j += std::string(first ? "\n" : ",\n") + "    " + json_quote(k) + ": " + json_quote(v);
    first = false;
  }
  j += "\n  },\n  \"tensors\": {";
  first = true;
  for (const auto& [name, list] : by_tensor) {
    int64_t held = 0, total = 1;
    for (int64_t s : list.front()->global_shape) total *= s;
    for (const PieceEntry* e : list) held += e->region.numel();
    // Each element is written by exactly one rank: with no two pieces overlapping, a count short
    // of the tensor's is a piece missing.
    const std::string overlap = overlapping(name, list);
    MERAK_CHECK(overlap.empty(), "checkpoint: ", overlap);
    MERAK_CHECK(held == total, "checkpoint: the pieces of '", name, "' hold ", held,
                " elements of its ", total, " (a piece missing)");
    j += std::string(first ? "\n" : ",\n") + "    " + json_quote(name) + ": {\"dtype\": \"" +
         dtype_name(list.front()->dtype) + "\", \"shape\": " +
         int_list(list.front()->global_shape) + ", \"pieces\": [";
    first = false;
    for (size_t k = 0; k < list.size(); ++k) {
      const PieceEntry& e = *list[k];
      j += std::string(k ? ",\n" : "\n") + "      {\"file\": " + json_quote(e.file) +
           ", \"offset\": " + int_list(e.region.offset) + ", \"shape\": " +
           int_list(e.region.shape) + ", \"elements\": [" + std::to_string(e.region.begin) +
           ", " + std::to_string(e.region.flat_end()) + "], \"bytes\": [" +
           std::to_string(e.byte_begin) + ", " + std::to_string(e.byte_end) +
           "], \"checksum\": \"" + checksum_hex(e.checksum) + "\"}";
    }
    j += "]}";
  }
  j += "\n  }\n}\n";
  OutFile out(step_dir + "/index.json");
  out.write(j.data(), j.size());
  out.sync_and_close();
}

void publish(const std::string& dir, int64_t step) {
  const std::string tmp = dir + "/." + step_name(step) + ".tmp";
  const std::string final_dir = dir + "/" + step_name(step);
  sync_dir(tmp);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(final_dir, ec))) {
    rename_or_fail(tmp, final_dir);
    sync_dir(dir);
    return;
  }
  // Only a step of ours is replaced: anything else under its name (a user's folder or file) is
  // left as it is, and this save fails naming it.
  if (!fs::is_directory(fs::symlink_status(final_dir, ec)) ||
      !fs::is_regular_file(fs::symlink_status(final_dir + "/index.json", ec)))
    fail("'" + final_dir + "' exists and is not a checkpoint step (no index.json): not replaced; " +
         "move it away to save step " + std::to_string(step) + " there");
  // The same step saved again (a run resumed before it), perhaps the one `latest` names: the two
  // directories swap in one step, so that the name never holds less than a complete step, and
  // then the old copy (now under the temporary name) goes.
  std::string old = tmp;
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS)
      fail(os_error("cannot swap '" + tmp + "' with", final_dir));
    // A file system that cannot swap (some network ones): the old copy goes aside, and back
    // if the new one cannot take its place. Only a kill between the two leaves the name empty.
    old = dir + "/." + step_name(step) + ".old";
    fs::remove_all(old, ec);
    rename_or_fail(final_dir, old);
    if (std::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      const std::string problem = os_error("cannot rename '" + tmp + "' to", final_dir);
      std::rename(old.c_str(), final_dir.c_str());
      fail(problem);
    }
  }
  sync_dir(dir);
  fs::remove_all(old, ec);
}

void point_latest(const std::string& dir, int64_t step) {
  const std::string tmp = dir + "/.latest.tmp";
  {
    OutFile out(tmp);
    const std::string name = step_name(step) + "\n";
    out.write(name.data(), name.size());
    out.sync_and_close();
  }
  rename_or_fail(tmp, latest_path(dir));
  sync_dir(dir);
}

void prune(const std::string& dir, int keep) {
  if (keep <= 0) return;
  const std::string latest = resolve(dir, true);
  std::map<int64_t, std::string> steps = steps_in(dir);
  // Steps past the one `latest` names are a run's that this one resumed before (from an earlier
  // step): counted in `keep`, they would push out this run's own steps. They are not counted,
  // and not deleted either: they may be the furthest a user got, kept on purpose. This run
  // replaces each one it saves again.
  auto newer = steps.end();
  for (auto it = steps.begin(); it != steps.end(); ++it)
    if (fs::path(dir + "/" + it->second) == fs::path(latest)) newer = std::next(it);
  steps.erase(newer, steps.end());
  int excess = int(steps.size()) - keep;
  for (const auto& [step, name] : steps) {
    if (excess <= 0) break;
    const std::string path = dir + "/" + name;
    if (fs::path(path) == fs::path(latest)) continue;
    std::error_code ec;
    fs::remove_all(path, ec);
    --excess;
  }
}

std::string resolve(const std::string& path, bool allow_empty) {
  if (fs::exists(path + "/index.json")) return path;
  const std::string latest = latest_path(path);
  if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string name;
    std::getline(in, name);
    if (!name.empty() && !entry_name(name))
      fail("checkpoint '" + path + "': latest names '" + name + "', not a step of its directory");
    const std::string step_dir = path + "/" + name;
    // Killed between publish's two renames: the step is whole under its old name (the next
    // save's begin_step renames it back).
    const std::string aside = path + "/." + name + ".old";
    if (!name.empty() && !fs::exists(step_dir) && fs::exists(aside + "/index.json"))
      return aside;
    if (name.empty() || !fs::exists(step_dir + "/index.json"))
      fail("checkpoint '" + path + "': latest names '" + name + "', which holds no index.json");
    return step_dir;
  }
  if (allow_empty && (!fs::exists(path) || fs::is_directory(path))) return "";
  if (!fs::exists(path)) fail("checkpoint '" + path + "': does not exist");
  fail("checkpoint '" + path + "': neither a step (no index.json) nor a checkpoint directory "
       "(no latest)");
}

Index read_index(const std::string& step_dir) {
  const std::string path = step_dir + "/index.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(os_error("cannot read", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Index index;
  index.dir = step_dir;
  try {
    const JsonValue root = parse_json(text);
    unique_keys(root, "index");
    const JsonValue* format = root.find("format");
    if (!format || format->kind() != JsonValue::Kind::String ||
        format->string("format") != "merak-checkpoint")
      fail(path + ": not a merak checkpoint index");
    index.version = int(root.at("version", "index").int64("version"));
    if (index.version != 1)
      fail(path + ": format version " + std::to_string(index.version) + ", this build reads 1");
    index.step = root.at("step", "index").int64("step");
    if (index.step < 0) fail("step " + std::to_string(index.step) + " is negative");
    index.config = root.at("config", "index").string("config");
    for (const auto& [key, value] :
         unique_keys(root.at("state", "index"), "state").members("state")) {
      index.state[key] = value.string("state '" + key + "'");
      if (!is_number(index.state[key]))
        fail("state '" + key + "': '" + index.state[key] + "' is not a number");
    }
    for (const auto& [name, tensor] :
         unique_keys(root.at("tensors", "index"), "tensors").members("tensors")) {
      const std::string what = "tensor '" + name + "'";
      unique_keys(tensor, what);
      TensorEntry t;
      t.dtype = dtype_from_name(tensor.at("dtype", what).string(what + " dtype"));
      t.shape = int_list(tensor.at("shape", what), what + " shape");
      for (const JsonValue& p : tensor.at("pieces", what).array(what + " pieces")) {
        unique_keys(p, what + " piece");
        PieceEntry e;
        e.tensor = name;
        e.dtype = t.dtype;
        e.global_shape = t.shape;
        e.file = p.at("file", what + " piece").string(what + " piece file");
        // Pieces lie in the step's own directory: a path elsewhere is a damaged index.
        if (!entry_name(e.file))
          fail(what + ": piece file '" + e.file + "' is not a file of the step's directory");
        e.region.offset = int_list(p.at("offset", what + " piece"), what + " piece offset");
        e.region.shape = int_list(p.at("shape", what + " piece"), what + " piece shape");
        const Shape elements =
            int_list(p.at("elements", what + " piece"), what + " piece elements");
        const Shape bytes = int_list(p.at("bytes", what + " piece"), what + " piece bytes");
        if (elements.size() != 2 || bytes.size() != 2) fail(what + ": a piece's ranges need 2 ends");
        e.region.begin = elements[0];
        e.region.end = elements[1];
        e.byte_begin = bytes[0];
        e.byte_end = bytes[1];
        const std::string& sum = p.at("checksum", what + " piece").string(what + " checksum");
        if (!checksum_from_hex(sum, &e.checksum))
          fail(what + ": a piece's checksum '" + sum + "' is not 1 to 16 hex digits");
        std::string why;
        if (!region_fits(e.region, t.shape, &why)) fail(what + ": " + why);
        if (e.byte_begin < 0 || e.byte_end < e.byte_begin)
          fail(what + ": a piece's byte range " + std::to_string(e.byte_begin) + ".." +
               std::to_string(e.byte_end) + " is not a range of a file");
        int64_t piece_bytes = 0;
        if (__builtin_mul_overflow(e.region.numel(), int64_t(dtype_size(t.dtype)), &piece_bytes) ||
            e.byte_end - e.byte_begin != piece_bytes)
          fail(what + ": a piece's byte range does not hold its " +
               std::to_string(e.region.numel()) + " elements");
        t.pieces.push_back(e);
      }
      std::vector<const PieceEntry*> pieces;
      for (const PieceEntry& e : t.pieces) pieces.push_back(&e);
      const std::string overlap = overlapping(name, pieces);
      if (!overlap.empty()) fail(overlap);
      index.tensors[name] = t;
    }
  } catch (const CheckpointError& e) {
    if (std::string(e.what()).rfind(path, 0) == 0) throw;
    fail(path + ": " + e.what());
  } catch (const JsonError& e) {
    fail(path + ": malformed index: " + e.what());
  } catch (const Error& e) {
    fail(path + ": " + e.what());
  }
  return index;
}

namespace {

// The text of state `key`, with what an error about it begins with.
const std::string& state_text(const Index& index, const std::string& key, std::string* where) {
  *where = index.dir + "/index.json: state '" + key + "'";
  auto it = index.state.find(key);
  if (it == index.state.end()) fail(*where + " is missing");
  return it->second;
}

}  // namespace

int64_t state_count(const Index& index, const std::string& key) {
  std::string where;
  const std::string& text = state_text(index, key, &where);
  // is_number first: strtoll alone would take a prefix, or skip spaces and a '+'.
  const bool whole = is_number(text) && text.find_first_of(".eE") == std::string::npos;
  const long long v = whole ? std::strtoll(text.c_str(), nullptr, 10) : -1;
  if (v < 0) fail(where + ": '" + text + "' is not a count (a whole number >= 0)");
  return v;
}

float state_float(const Index& index, const std::string& key) {
  std::string where;
  const std::string& text = state_text(index, key, &where);
  const double v = is_number(text) ? std::strtod(text.c_str(), nullptr) : NAN;
  const float f = float(v);
  if (!std::isfinite(f) || (v != 0 && f == 0))
    fail(where + ": '" + text + "' is not a number f32 holds");
  return f;
}

}  // namespace merak::checkpoint
