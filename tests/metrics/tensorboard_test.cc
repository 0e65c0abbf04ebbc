// TensorBoard writer: files decoded by an independent reader (tests/metrics/read_events.py, run
// with /usr/bin/python3 or $PYTHON: its own TFRecord parser and CRC-32C, TensorFlow's Event built
// from a descriptor) give back every tag, step and float bit for bit; a corrupted or truncated
// file is rejected by that reader; buffering, the file name, the directory and error paths.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/metrics/crc32c.h"
#include "merak/metrics/tensorboard.h"
#include "tests/test_files.h"

using merak::metrics::TensorBoardOptions;
using merak::metrics::TensorBoardWriter;

using namespace merak::testing;  // tests/test_files.h

namespace {

size_t file_size(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return size_t(st.st_size);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Run {
  int status = -1;
  std::string output;  // stdout (and stderr when merged)
};

// The independent reader on `file`; its stderr goes into output too when `merge_stderr`.
Run read_events(const std::string& file, bool merge_stderr = false) {
  const char* env = std::getenv("PYTHON");
  const std::string python = env && *env ? env : "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0)
    FAIL(python << " is missing: the event-file check needs python3 with google.protobuf");
  const std::string cmd = "'" + python + "' '" + runfile("tests/metrics/read_events.py") +
                          "' '" + file + "'" + (merge_stderr ? " 2>&1" : "");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  Run run;
  char chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) run.output.append(chunk, n);
  const int status = ::pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::vector<std::vector<std::string>> lines_of(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      fields.push_back(line.substr(start, tab - start));
    fields.push_back(line.substr(start));
    out.push_back(fields);
  }
  return out;
}

struct Scalar {
  std::string tag;
  int64_t step;
  float value;
};

// Decodes `file` with the python reader, checking the version record, and returns the scalars.
std::vector<Scalar> decode(const std::string& file) {
  const Run run = read_events(file, true);
  INFO(run.output);
  REQUIRE(run.status == 0);
  const auto lines = lines_of(run.output);
  REQUIRE(!lines.empty());
  REQUIRE(lines[0].size() == 3);
  CHECK(lines[0][0] == "version");
  CHECK(lines[0][1] == "brain.Event:2");
  CHECK(std::stod(lines[0][2]) > 1.6e9);  // a Unix time in seconds
  std::vector<Scalar> out;
  for (size_t i = 1; i < lines.size(); ++i) {
    REQUIRE(lines[i].size() == 5);
    REQUIRE(lines[i][0] == "scalar");
    const uint32_t u = uint32_t(std::stoul(lines[i][2], nullptr, 16));
    float f;
    std::memcpy(&f, &u, 4);
    CHECK(std::stod(lines[i][3]) > 1.6e9);
    out.push_back({lines[i][4], std::stoll(lines[i][1]), f});
  }
  return out;
}

void check_same(const std::vector<Scalar>& got, const std::vector<Scalar>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("record " << i + 1 << ": " << want[i].tag << " at step " << want[i].step);
    CHECK(got[i].tag == want[i].tag);
    CHECK(got[i].step == want[i].step);
    if (std::isnan(want[i].value))
      CHECK(std::isnan(got[i].value));
    else
      CHECK(bits(got[i].value) == bits(want[i].value));
  }
}

std::string hostname() {
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof(name) - 1) == 0);
  return name;
}

// A file with a few scalars per step, as a training loop writes them.
std::vector<Scalar> training_scalars() {
  std::vector<Scalar> s;
  float loss = 10.9f, lr = 0.f;
  for (int64_t step = 0; step < 40; ++step) {
    s.push_back({"train/loss", step, loss});
    s.push_back({"train/lr", step, lr});
    if (step % 10 == 0) s.push_back({"eval/loss", step, loss * 1.01f});
    loss *= 0.93f;
    lr = step < 10 ? 3e-4f * float(step + 1) / 10.f : 3e-4f * 0.5f;
  }
  const float inf = std::numeric_limits<float>::infinity();
  s.push_back({"edge/denormal", 40, std::numeric_limits<float>::denorm_min()});
  s.push_back({"edge/max", 40, std::numeric_limits<float>::max()});
  s.push_back({"edge/neg", 40, -1234.5678f});
  s.push_back({"edge/negzero", 40, -0.0f});
  s.push_back({"edge/inf", 40, inf});
  s.push_back({"edge/nan", 40, std::nanf("")});
  s.push_back({"edge/zero", 0, 0.0f});  // step 0 and value 0: fields proto3 leaves out
  s.push_back({"edge/big_step", int64_t(1) << 40, 1.f});
  s.push_back({"edge/negative_step", -5, 2.f});
  s.push_back({"scope/with space/ünïcode", 41, 0.1f});
  return s;
}

}  // namespace

TEST_CASE("tensorboard: scalars round-trip through an independent reader", "[metrics]") {
  const std::string dir = temp_path("tb_roundtrip/nested/run1");  // created, parents included
  const auto want = training_scalars();
  std::string path;
  {
    TensorBoardWriter writer(dir, TensorBoardOptions{7, 3600.0});
    path = writer.path();
    for (const auto& s : want) writer.scalar(s.tag, s.step, s.value);
    CHECK(writer.records() == want.size() + 1);
  }  // the destructor flushes the rest
  check_same(decode(path), want);

  // TensorBoard's naming: <dir>/events.out.tfevents.<unix seconds>.<hostname>
  const std::string prefix = dir + "/events.out.tfevents.";
  REQUIRE(path.compare(0, prefix.size(), prefix) == 0);
  const std::string rest = path.substr(prefix.size());
  const size_t dot = rest.find('.');
  REQUIRE(dot != std::string::npos);
  const long long seconds = std::stoll(rest.substr(0, dot));
  CHECK(rest.substr(0, dot).find_first_not_of("0123456789") == std::string::npos);
  CHECK(std::llabs(seconds - (long long)std::time(nullptr)) < 600);
  CHECK(rest.substr(dot + 1) == hostname());
}

TEST_CASE("tensorboard: the reader rejects corrupted and truncated files", "[metrics]") {
  const std::string dir = temp_path("tb_corrupt");
  std::string path;
  {
    TensorBoardWriter writer(dir);
    path = writer.path();
    writer.scalar("train/loss", 1, 2.5f);
    writer.scalar("train/lr", 1, 1e-4f);
    writer.scalar("train/loss", 2, 2.25f);
  }
  const std::string good = read_file(path);
  REQUIRE(decode(path).size() == 3);

  // Byte offsets of each record's start, from the framing.
  std::vector<size_t> starts;
  for (size_t pos = 0; pos < good.size();) {
    starts.push_back(pos);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= uint64_t(uint8_t(good[pos + i])) << (8 * i);
    pos += 12 + len + 4;
    REQUIRE(pos <= good.size());
  }
  REQUIRE(starts.size() == 4);

  struct Damage {
    const char* what;
    size_t offset;
    const char* reason;
  };
  const size_t second = starts[2];
  const Damage cases[] = {
      {"a byte of a record's data", second + 12 + 3, "data CRC mismatch"},
      {"a byte of a length", second + 1, "length CRC mismatch"},
      {"a byte of the length CRC", second + 9, "length CRC mismatch"},
      {"a byte of the data CRC", starts[3] - 2, "data CRC mismatch"},
      {"the last byte of the file", good.size() - 1, "data CRC mismatch"},
      {"the first record's data", 12, "data CRC mismatch"},
  };
  const std::string bad_path = dir + "/damaged.tfevents";
  for (const auto& d : cases) {
    std::string bad = good;
    bad[d.offset] = char(bad[d.offset] ^ 0x10);
    write_file(bad_path, bad);
    const Run run = read_events(bad_path, true);
    INFO("damaged " << d.what << " at " << d.offset << ": " << run.output);
    CHECK(run.status == 1);
    CHECK(run.output.find(d.reason) != std::string::npos);
  }

  for (size_t cut : {size_t(1), size_t(4), size_t(10), good.size() - starts[3] - 3}) {
    write_file(bad_path, good.substr(0, good.size() - cut));
    const Run run = read_events(bad_path, true);
    INFO("cut " << cut << " bytes: " << run.output);
    CHECK(run.status == 1);
    CHECK(run.output.find("truncated") != std::string::npos);
  }

  // And the untouched copy still passes.
  write_file(bad_path, good);
  CHECK(read_events(bad_path).status == 0);
}

TEST_CASE("tensorboard: writes are buffered until N records, flush() or the destructor",
          "[metrics]") {
  const std::string dir = temp_path("tb_buffering");
  TensorBoardWriter writer(dir, TensorBoardOptions{4, 3600.0});
  const std::string path = writer.path();
  const size_t header = file_size(path);
  CHECK(header > 16);  // the version record is on disk at once
  CHECK(decode(path).empty());

  writer.scalar("a", 1, 1.f);
  writer.scalar("a", 2, 2.f);
  writer.scalar("a", 3, 3.f);
  CHECK(file_size(path) == header);  // three records wait in memory
  writer.scalar("a", 4, 4.f);        // the fourth writes all four
  const size_t four = file_size(path);
  CHECK(four > header);
  CHECK(decode(path).size() == 4);

  writer.scalar("b", 5, 5.f);
  CHECK(file_size(path) == four);
  writer.flush();
  CHECK(file_size(path) > four);
  check_same(decode(path), {{"a", 1, 1.f}, {"a", 2, 2.f}, {"a", 3, 3.f}, {"a", 4, 4.f},
                            {"b", 5, 5.f}});
  writer.flush();  // nothing waiting: harmless
  CHECK(decode(path).size() == 5);
}

TEST_CASE("tensorboard: a time limit flushes a slow stream of records", "[metrics]") {
  TensorBoardWriter writer(temp_path("tb_timed"), TensorBoardOptions{1000, 0.05});
  const size_t header = file_size(writer.path());
  writer.scalar("x", 1, 1.f);  // may or may not land: the limit counts from the header's write
  ::usleep(120 * 1000);
  writer.scalar("x", 2, 2.f);  // arrives after the limit: everything is written
  CHECK(file_size(writer.path()) > header);
  CHECK(decode(writer.path()).size() == 2);
}

TEST_CASE("tensorboard: a group of scalars is flushed whole by the time limit", "[metrics]") {
  // A slow training step: its first record arrives after the limit. scalar() by scalar(), that
  // record's flush would leave the rest of the step in memory until the next step.
  TensorBoardWriter writer(temp_path("tb_group"), TensorBoardOptions{1000, 0.05});
  writer.scalars(1, {{"train/loss", 3.f}, {"train/lr", 1.f}});
  ::usleep(120 * 1000);
  writer.scalars(2, {{"train/loss", 2.f}, {"train/lr", 0.5f}, {"valid/loss", 2.5f}});
  check_same(decode(writer.path()), {{"train/loss", 1, 3.f}, {"train/lr", 1, 1.f},
                                     {"train/loss", 2, 2.f}, {"train/lr", 2, 0.5f},
                                     {"valid/loss", 2, 2.5f}});
}

TEST_CASE("tensorboard: a resumed run's SessionLog START is written through", "[metrics]") {
  TensorBoardWriter writer(temp_path("tb_session_start"));
  writer.session_start(5001);  // resumed after step 5000
  writer.scalar("train/loss", 5001, 1.5f);
  const Run run = read_events(writer.path(), true);
  INFO(run.output);
  REQUIRE(run.status == 0);
  const auto lines = lines_of(run.output);
  REQUIRE(lines.size() == 2);  // the version and the START; the scalar waits in memory
  REQUIRE(lines[1].size() == 3);
  CHECK(lines[1][0] == "start");
  CHECK(lines[1][1] == "5001");
  CHECK(std::stod(lines[1][2]) > 1.6e9);
  CHECK(writer.records() == 3);
  // The bytes themselves, with no descriptor: after the version record (8-byte length, 4-byte
  // CRC, data, 4-byte CRC), the START event ends in field 7 (tag 0x3A: TensorBoard's
  // session_log; 6 is the deprecated log_message it ignores) holding status 1 (08 01).
  const std::string bytes = read_file(writer.path());
  uint64_t first = 0;
  std::memcpy(&first, bytes.data(), 8);
  const size_t second = size_t(8 + 4 + first + 4);
  REQUIRE(bytes.size() > second + 12);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data() + second, 8);
  const std::string event = bytes.substr(second + 12, size_t(length));
  CHECK(event.substr(event.size() - 4) == std::string("\x3a\x02\x08\x01", 4));
}

TEST_CASE("tensorboard: two writers in one directory get separate files", "[metrics]") {
  const std::string dir = temp_path("tb_two");
  TensorBoardWriter a(dir), b(dir);
  CHECK(a.path() != b.path());
  a.scalar("a", 1, 1.f);
  b.scalar("b", 1, 2.f);
  a.flush();
  b.flush();
  check_same(decode(a.path()), {{"a", 1, 1.f}});
  check_same(decode(b.path()), {{"b", 1, 2.f}});
}

TEST_CASE("tensorboard: errors name the path", "[metrics]") {
  const std::string file = temp_path("tb_not_a_dir");
  write_file(file, "x");
  try {
    TensorBoardWriter writer(file);
    FAIL("a regular file accepted as the log directory");
  } catch (const merak::Error& e) {
    CHECK(std::string(e.what()).find(file) != std::string::npos);
  }
  const std::string below = file + "/sub";
  try {
    TensorBoardWriter writer(below);
    FAIL("a directory below a regular file was created");
  } catch (const merak::Error& e) {
    CHECK(std::string(e.what()).find(below) != std::string::npos);
  }
}

TEST_CASE("tensorboard: the framing of one record", "[metrics]") {
  using namespace merak::metrics;
  const std::string data = "hello, tensorboard";
  const std::string rec = tfrecord_frame(data);
  REQUIRE(rec.size() == 8 + 4 + data.size() + 4);
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(rec[at + i])) << (8 * i);
    return v;
  };
  CHECK(le(0, 8) == data.size());
  CHECK(le(8, 4) == crc32c_mask(crc32c(rec.data(), 8)));
  CHECK(rec.substr(12, data.size()) == data);
  CHECK(le(12 + data.size(), 4) == crc32c_mask(crc32c(data)));
  CHECK(tfrecord_frame("").size() == 16);
}
