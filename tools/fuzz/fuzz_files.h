// What the file-reading fuzz targets share: cutting one fuzz input into the several files a
// reader wants, and writing them into a private temporary directory. Header only; each target
// includes it once.
//
// An input is its parts joined by kSplit (make_corpus.sh joins real files the same way); a part
// may be empty. The separator is long and unlikely in real files, and the targets' dictionary
// (tools/fuzz/split.dict) holds it so that mutations can insert it.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace merak::fuzz {

inline constexpr std::string_view kSplit = "\n--merak-fuzz-split--\n";

// The input's parts: split at each kSplit, at most `max_parts` of them (the last keeps any
// further separators); never empty (an input with no separator is one part).
inline std::vector<std::string_view> split_input(const uint8_t* data, size_t size,
                                                 size_t max_parts) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  size_t at = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t cut = all.find(kSplit, at);
    if (cut == std::string_view::npos) break;
    parts.push_back(all.substr(at, cut - at));
    at = cut + kSplit.size();
  }
  parts.push_back(all.substr(at));
  return parts;
}

// Part i, or empty where the input has fewer parts.
inline std::string_view part(const std::vector<std::string_view>& parts, size_t i) {
  return i < parts.size() ? parts[i] : std::string_view();
}

[[noreturn]] inline void harness_failure(const char* what, const std::string& path) {
  std::fprintf(stderr, "fuzz harness: %s %s: %s\n", what, path.c_str(), std::strerror(errno));
  std::abort();
}

// A directory of this process's own, /dev/shm/merak-fuzz-PID (under $TMPDIR or /tmp without
// /dev/shm: the targets write files at every execution), made on first use and removed at exit
// with the files written into it; ones that dead processes left behind are removed at start.
class TempDir {
 public:
  static TempDir& get() {
    static TempDir dir;
    return dir;
  }
  const std::string& path() const { return path_; }
  void note(const std::string& name) {
    for (const std::string& n : names_)
      if (n == name) return;
    names_.push_back(name);
  }

 private:
  TempDir() {
    const char* shm = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::getenv("TMPDIR");
    const std::string base = shm ? shm : "/tmp";
    remove_stale(base);
    path_ = base + "/merak-fuzz-" + std::to_string(::getpid());
    if (::mkdir(path_.c_str(), 0700) != 0 && errno != EEXIST) harness_failure("mkdir", path_);
  }
  // The directories of targets that are gone without removing theirs (a crash, or libFuzzer
  // running single inputs, which ends without exit-time destructors).
  static void remove_stale(const std::string& base) {
    DIR* dir = ::opendir(base.c_str());
    if (dir == nullptr) return;
    const std::string prefix = "merak-fuzz-";
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid <= 0 || ::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
      const std::string path = base + "/" + name;
      if (DIR* stale = ::opendir(path.c_str())) {
        while (const dirent* file = ::readdir(stale))
          if (file->d_name[0] != '.') ::unlink((path + "/" + file->d_name).c_str());
        ::closedir(stale);
      }
      ::rmdir(path.c_str());
    }
    ::closedir(dir);
  }
  ~TempDir() {
    for (const std::string& name : names_) ::unlink((path_ + "/" + name).c_str());
    ::rmdir(path_.c_str());
  }
  std::string path_;
  std::vector<std::string> names_;
};

// Writes `bytes` to NAME in the temporary directory (replacing it) and returns its path. A
// failure here is the harness's, not the code under test's: it aborts.
inline std::string write_temp(const std::string& name, std::string_view bytes) {
  TempDir& dir = TempDir::get();
  const std::string path = dir.path() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) harness_failure("open", path);
  dir.note(name);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) harness_failure("write", path);
    done += size_t(n);
  }
  ::close(fd);
  return path;
}

}  // namespace merak::fuzz
