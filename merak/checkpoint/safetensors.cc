#include "merak/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "merak/core/json.h"
#include "merak/core/read_file.h"

namespace merak::checkpoint {

// Tensor bytes are copied between memory and file as they are; the format is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

namespace {

// The safetensors library refuses headers above 100 MB; so do we, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

#define SAFETENSORS_FAIL(path, ...) MERAK_FAIL("safetensors file '", path, "': ", __VA_ARGS__)
#define SAFETENSORS_CHECK(cond, path, ...) \
  MERAK_CHECK(cond, "safetensors file '", path, "': ", __VA_ARGS__)

// ---- dtypes -------------------------------------------------------------------------------

const char* format_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

bool dtype_from_format(const std::string& name, DType* out) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64,
                  DType::Bool}) {
    if (name == format_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// ---- writing the header -------------------------------------------------------------------


// ---- parsing the header -------------------------------------------------------------------

using Entry = SafetensorsReader::Entry;

// A non-negative integer list (a shape, byte offsets).
Shape sizes(const JsonValue& v, const std::string& what, const std::string& path) {
  Shape out;
  for (const JsonValue& x : v.array(what)) {
    const int64_t n = x.int64(what);
    if (n < 0) SAFETENSORS_FAIL(path, what, ": expected a non-negative integer, got ", n);
    out.push_back(n);
  }
  return out;
}

// The header: an object of tensor descriptions ({dtype, shape, data_offsets}) in file order,
// and under "__metadata__" an object of strings.
void read_header(const std::string& text, const std::string& path, std::vector<Entry>* entries,
                 std::map<std::string, std::string>* metadata) {
  try {
    const JsonValue root = parse_json(text);
    std::set<std::string> seen;
    for (const auto& [name, value] : root.members("the header")) {
      if (!seen.insert(name).second) SAFETENSORS_FAIL(path, "duplicate key '", name, "'");
      if (name == "__metadata__") {
        for (const auto& [k, v] : value.members("__metadata__"))
          (*metadata)[k] = v.string("__metadata__ '" + k + "'");
        continue;
      }
      const std::string what = "tensor '" + name + "'";
      Entry e;
      e.name = name;
      std::set<std::string> fields;
      for (const auto& [field, v] : value.members(what)) {
        if (field != "dtype" && field != "shape" && field != "data_offsets")
          SAFETENSORS_FAIL(path, "unexpected field '", field, "' in ", what);
        if (!fields.insert(field).second)  // our parser keeps both; which one is meant?
          SAFETENSORS_FAIL(path, "duplicate field '", field, "' in ", what);
      }
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!value.find(field)) SAFETENSORS_FAIL(path, what, " lacks ", field);
      const std::string& dt = value.find("dtype")->string(what + " dtype");
      if (!dtype_from_format(dt, &e.dtype))
        SAFETENSORS_FAIL(path, "unknown dtype '", dt, "' of ", what,
                         " (supported: F32, F64, BF16, F16, I32, I64, BOOL)");
      e.shape = sizes(*value.find("shape"), what + " shape", path);
      const Shape offsets = sizes(*value.find("data_offsets"), what + " data_offsets", path);
      if (offsets.size() != 2)
        SAFETENSORS_FAIL(path, "data_offsets of ", what, " must be [begin, end]");
      e.begin = offsets[0];
      e.end = offsets[1];
      entries->push_back(e);
    }
  } catch (const JsonError& e) {
    SAFETENSORS_FAIL(path, "bad header JSON: ", e.what());
  }
}

// Bytes a tensor of this shape and dtype needs, or -1 when that overflows int64.
int64_t byte_size(const Shape& shape, DType dtype) {
  int64_t n = int64_t(dtype_size(dtype));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// Checks the byte ranges the way the safetensors library does: taken in order, each tensor
// starts where the previous one ended, holds exactly its shape's bytes, and the last one ends
// at the end of the data buffer.
void check_layout(std::vector<Entry>& entries, int64_t buffer_bytes, const std::string& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    SAFETENSORS_CHECK(e.begin <= e.end, path, "tensor '", e.name, "' has data_offsets [",
                      e.begin, ", ", e.end, "] with begin after end");
    SAFETENSORS_CHECK(e.end <= buffer_bytes, path, "tensor '", e.name, "' has data_offsets [",
                      e.begin, ", ", e.end, "] past the end of the ", buffer_bytes,
                      "-byte data buffer (file truncated?)");
    SAFETENSORS_CHECK(e.begin >= at, path, "tensor '", e.name, "' (bytes [", e.begin, ", ",
                      e.end, ")) overlaps tensor '", prev ? prev->name : "", "'");
    SAFETENSORS_CHECK(e.begin == at, path, "gap of ", e.begin - at, " bytes before tensor '",
                      e.name, "' at byte ", at, " of the data buffer");
    const int64_t need = byte_size(e.shape, e.dtype);
    SAFETENSORS_CHECK(need == e.end - e.begin, path, "tensor '", e.name, "' is ",
                      format_name(e.dtype), shape_str(e.shape), " (", need,
                      " bytes) but its data_offsets [", e.begin, ", ", e.end, "] hold ",
                      e.end - e.begin, " bytes");
    at = e.end;
    prev = &e;
  }
  SAFETENSORS_CHECK(at == buffer_bytes, path, "the data buffer has ", buffer_bytes,
                    " bytes but its tensors cover ", at);
}

// ---- file I/O -----------------------------------------------------------------------------

std::string errno_text() { return std::strerror(errno); }

}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Spec>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tensors_(tensors) {
  // The header: metadata first (as the safetensors library writes it), then the tensors with
  // consecutive byte ranges in the given order.
  std::string header = "{";
  if (!metadata.empty()) {
    header += json_quote("__metadata__");
    header += ":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      header += json_quote(key);
      header += ':';
      header += json_quote(value);
    }
    header += '}';
  }
  std::set<std::string> names;
  int64_t offset = 0;
  for (const Spec& t : tensors) {
    SAFETENSORS_CHECK(t.name != "__metadata__", path, "'__metadata__' is not a valid tensor name");
    SAFETENSORS_CHECK(names.insert(t.name).second, path, "tensor '", t.name, "' given twice");
    const int64_t bytes = byte_size(t.shape, t.dtype);
    const bool sizes_ok = std::all_of(t.shape.begin(), t.shape.end(), [](int64_t d) {
      return d >= 0;
    });
    SAFETENSORS_CHECK(sizes_ok && bytes >= 0, path, "tensor '", t.name, "' of shape ",
                      shape_str(t.shape), " has no byte size");
    if (header.size() > 1) header += ',';
    header += json_quote(t.name);
    header += ":{\"dtype\":\"";
    header += format_name(t.dtype);
    header += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + ',' +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // data then starts 8-byte aligned

  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));

  // Written beside the target, made durable, then renamed over it by commit(): readers see the
  // old file or the whole new one.
  tmp_ = path + ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(tmp_.c_str(), "wb");
  SAFETENSORS_CHECK(file_, path, "cannot create temporary file '", tmp_, "': ", errno_text());
  if (std::fwrite(length, 1, 8, file_) != 8 ||
      std::fwrite(header.data(), 1, header.size(), file_) != header.size())
    abandon("write failed: " + errno_text());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
}

void SafetensorsWriter::abandon(const std::string& problem) {
  std::fclose(file_);
  file_ = nullptr;
  std::remove(tmp_.c_str());
  SAFETENSORS_FAIL(path_, problem);
}

void SafetensorsWriter::write(const Tensor& tensor) {
  SAFETENSORS_CHECK(file_, path_, "write after the file was committed or abandoned");
  SAFETENSORS_CHECK(written_ < tensors_.size(), path_, "more tensors written than declared (",
                    tensors_.size(), ")");
  const Spec& want = tensors_[written_];
  SAFETENSORS_CHECK(tensor.defined() && tensor.device().is_cpu(), path_, "tensor '", want.name,
                    "' is ", tensor.str(), "; only CPU tensors with data can be saved");
  SAFETENSORS_CHECK(tensor.dtype() == want.dtype && tensor.shape() == want.shape, path_,
                    "tensor '", want.name, "' is ", tensor.str(), ", declared ",
                    format_name(want.dtype), shape_str(want.shape));
  const Tensor c = tensor.contiguous();
  const size_t n = size_t(c.nbytes());
  if (n != 0 && std::fwrite(c.raw_data(), 1, n, file_) != n) abandon("write failed: " + errno_text());
  ++written_;
}

void SafetensorsWriter::commit() {
  SAFETENSORS_CHECK(file_, path_, "commit after the file was committed or abandoned");
  if (written_ != tensors_.size())
    abandon("only " + std::to_string(written_) + " of " + std::to_string(tensors_.size()) +
            " tensors written");
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const std::string write_error = errno_text();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) {
    std::remove(tmp_.c_str());
    SAFETENSORS_FAIL(path_, "write failed: ", ok ? errno_text() : write_error);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp_.c_str());
    SAFETENSORS_FAIL(path_, "cannot rename '", tmp_, "' into place: ", why);
  }
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, tensor] : tensors) {
    SAFETENSORS_CHECK(tensor.defined() && tensor.device().is_cpu(), path, "tensor '", name,
                      "' is ", tensor.str(), "; only CPU tensors with data can be saved");
    specs.push_back({name, tensor.dtype(), tensor.shape()});
  }
  SafetensorsWriter out(path, specs, metadata);
  for (const auto& entry : tensors) out.write(entry.second);
  out.commit();
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SAFETENSORS_CHECK(fd_ >= 0, path, "cannot open: ", errno_text());
  try {
    struct stat st;
    SAFETENSORS_CHECK(::fstat(fd_, &st) == 0, path, "cannot stat: ", errno_text());
    SAFETENSORS_CHECK(!S_ISDIR(st.st_mode), path, "cannot read: ", std::strerror(EISDIR));
    const uint64_t file_bytes = uint64_t(st.st_size);

    unsigned char length[8];
    SAFETENSORS_CHECK(file_bytes >= 8, path, "truncated: ", file_bytes,
                      " bytes, less than the 8-byte header length");
    SAFETENSORS_CHECK(pread_all(fd_, reinterpret_cast<char*>(length), 8, 0) == 8, path,
                      "cannot read the header length: ", errno_text());
    uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i) header_bytes |= uint64_t(length[i]) << (8 * i);
    SAFETENSORS_CHECK(header_bytes >= 2 && header_bytes <= kMaxHeaderBytes, path,
                      "bad header length ", header_bytes, " (must be 2 to ", kMaxHeaderBytes,
                      ")");
    SAFETENSORS_CHECK(header_bytes <= file_bytes - 8, path, "bad header length ", header_bytes,
                      ": the file has only ", file_bytes - 8, " bytes after it (truncated?)");
    std::string header(size_t(header_bytes), '\0');
    SAFETENSORS_CHECK(pread_all(fd_, &header[0], header.size(), 8) == ssize_t(header.size()),
                      path, "cannot read the header: ", errno_text());

    read_header(header, path, &entries_, &metadata_);
    check_layout(entries_, int64_t(file_bytes - 8 - header_bytes), path);
    data_start_ = int64_t(8 + header_bytes);
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() { ::close(fd_); }

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

Tensor SafetensorsReader::read(const std::string& name) const {
  auto it = index_.find(name);
  SAFETENSORS_CHECK(it != index_.end(), path_, "no tensor '", name, "'");
  const Entry& e = entries_[it->second];
  Tensor t = Tensor::empty(e.shape, e.dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  const size_t n = size_t(t.nbytes());
  errno = 0;
  const ssize_t got = pread_all(fd_, reinterpret_cast<char*>(bytes), n, data_start_ + e.begin);
  SAFETENSORS_CHECK(got == ssize_t(n), path_, "cannot read tensor '", name, "': ",
                    got < 0 || errno != 0 ? errno_text()
                                          : "the file is shorter (changed while reading?)");
  if (e.dtype == DType::Bool)  // any nonzero byte is true; C++ bool must be 0 or 1
    for (size_t i = 0; i < n; ++i) bytes[i] = bytes[i] != 0;
  return t;
}

std::vector<std::pair<std::string, Tensor>> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  const SafetensorsReader file(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : file.names()) out.emplace_back(name, file.read(name));
  if (metadata) *metadata = file.metadata();
  return out;
}

}  // namespace merak::checkpoint
