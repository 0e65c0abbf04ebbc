#include "merak/metrics/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "merak/core/error.h"
#include "merak/metrics/crc32c.h"
#include "merak/metrics/event.pb.h"

namespace merak::metrics {
namespace {

// TensorBoard recognises event files by this version string in the first record.
constexpr const char* kFileVersion = "brain.Event:2";

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}

void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) MERAK_FAIL(dir, ": cannot create the TensorBoard log directory (", ec.message(), ")");
  if (!std::filesystem::is_directory(dir, ec))
    MERAK_FAIL(dir, ": cannot create the TensorBoard log directory (not a directory)");
}

// Opens a file that did not exist before, so two writers started in the same second never
// share one.
int open_new(const std::string& base, std::string& path) {
  for (int attempt = 0;; ++attempt) {
    path = attempt == 0 ? base : base + "." + std::to_string(attempt);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST || attempt >= 1000)
      MERAK_FAIL(path, ": cannot create the TensorBoard event file (", std::strerror(errno), ")");
  }
}

}  // namespace

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, crc32c_mask(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, crc32c_mask(crc32c(data)), 4);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, TensorBoardOptions options)
    : options_(options) {
  make_directory(dir);
  const double now = unix_seconds();
  std::string base = dir;
  if (!base.empty() && base.back() != '/') base += '/';
  base += "events.out.tfevents." + std::to_string(int64_t(now)) + "." + hostname();
  fd_ = open_new(base, path_);

  Event first;
  first.set_wall_time(now);
  first.set_file_version(kFileVersion);
  append_record(first.SerializeAsString());
  try {
    flush();  // a valid (if empty) event file from the start
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    if (!failed_) flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak: TensorBoard writer: %s\n", e.what());
  }
  ::close(fd_);
}

void TensorBoardWriter::append_record(const std::string& data) {
  buffer_ += tfrecord_frame(data);
  ++pending_;
  ++records_;
}

void TensorBoardWriter::append_scalar(std::string_view tag, int64_t step, float value) {
  Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(value);
  append_record(event.SerializeAsString());
}

void TensorBoardWriter::flush_if_due() {
  if (pending_ >= options_.flush_every_records) {
    flush();
  } else {
    const std::chrono::duration<double> since = std::chrono::steady_clock::now() - last_write_;
    if (since.count() >= options_.flush_every_seconds) flush();
  }
}

void TensorBoardWriter::scalar(std::string_view tag, int64_t step, float value) {
  scalars(step, {{std::string(tag), value}});
}

void TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, float>>& values) {
  for (const auto& [tag, value] : values) append_scalar(tag, step, value);
  flush_if_due();
}

void TensorBoardWriter::session_start(int64_t step) {
  Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  event.mutable_session_log()->set_status(SessionLog::START);
  append_record(event.SerializeAsString());
  flush();
}

void TensorBoardWriter::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      buffer_.erase(0, done);  // what reached the file is not written twice
      failed_ = true;
      throw Error(path_ + ": cannot write the TensorBoard event file (" + std::strerror(err) +
                  ")");
    }
    done += size_t(n);
  }
  buffer_.clear();
  pending_ = 0;
  last_write_ = std::chrono::steady_clock::now();
}

}  // namespace merak::metrics
