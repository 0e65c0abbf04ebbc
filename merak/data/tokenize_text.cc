// Documents encoded on several threads and handed back in input order (encode_documents).
#include "merak/data/tokenize_text.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace merak::data {
namespace {

// Pieces encoded together on one worker.
struct Job {
  std::vector<TextPiece> pieces;
  std::vector<std::vector<int64_t>> ids;
  bool done = false;
  std::string error;
};

// Worker threads, each with its own encoder, taking jobs in the order given.
class Pool {
 public:
  Pool(int threads, const TextEncoder& prototype) {
    for (int t = 0; t < threads; ++t)
      workers_.emplace_back([this, enc = prototype]() mutable { work(enc); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queue_.clear();  // on an error, jobs not started are dropped
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void submit(std::shared_ptr<Job> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(job));
    }
    work_cv_.notify_one();
  }
  void wait(const Job& job) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return job.done; });
  }

 private:
  void work(TextEncoder& enc) {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        for (const TextPiece& s : job->pieces) job->ids.push_back(enc.encode(s.text));
      } catch (const std::exception& e) {
        job->error = e.what();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        job->done = true;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::vector<int64_t> TextEncoder::encode(std::string_view text) {
  // A document's text is plain text, as llm.c's (encode_ordinary) and Megatron's preprocessing
  // encode it: "<|endoftext|>" written in a document is not an end of document.
  if (gpt2_) return gpt2_->encode(text, false);
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

void encode_documents(const std::vector<std::string>& files, const TextEncoder& encoder,
                      const TextOptions& options, const PieceCallback& each) {
  const int threads = std::max(1, options.threads);
  DocumentReader docs(files, options, encoder.gpt2());
  Pool pool(threads, encoder);
  std::deque<std::shared_ptr<Job>> in_flight;
  // The oldest job, once encoded, to the callback.
  auto drain = [&] {
    std::shared_ptr<Job> job = std::move(in_flight.front());
    in_flight.pop_front();
    pool.wait(*job);
    if (!job->error.empty()) throw EncodeError(job->error);
    for (size_t i = 0; i < job->pieces.size(); ++i) each(job->pieces[i], job->ids[i]);
  };
  auto job = std::make_shared<Job>();
  size_t job_bytes = 0;
  TextPiece s;
  for (;;) {
    const bool more = docs.next(&s);
    if (more) {
      job_bytes += s.text.size();
      job->pieces.push_back(std::move(s));
    }
    if (!job->pieces.empty() && (!more || job_bytes >= options.chunk_bytes)) {
      pool.submit(job);
      in_flight.push_back(std::move(job));
      job = std::make_shared<Job>();
      job_bytes = 0;
      while (in_flight.size() >= size_t(4 * threads)) drain();
    }
    if (!more) break;
  }
  while (!in_flight.empty()) drain();
}

}  // namespace merak::data
