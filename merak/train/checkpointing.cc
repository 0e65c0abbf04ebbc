// The Trainer's checkpoints: every rank writes the pieces of the state it owns (Engine::
// checkpoint_pieces) to a file of its own, rank 0 gathers their entries into the index and
// publishes the step; loading, every rank reads the pieces that overlap its shards. Each phase
// ends with the ranks agreeing, so a rank's failure stops all of them, none left waiting.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"
#include "merak/log/log.h"
#include "merak/runtime/engine_comm.h"
#include "merak/train/checkpointing.h"
#include "merak/train/trainer.h"
#include "models/weights_file.h"

namespace merak::train {
namespace {

using Clock = std::chrono::steady_clock;

// The config that wrote a checkpoint (`index`, its index.json); false when this build cannot
// take its keys (from a version with other keys): it is then not compared with this run's, and
// the tensors' shapes are still checked as they load. Text that is not YAML at all is a damaged
// index: the ConfigError naming the place goes on.
bool saved_config(const std::string& index, const std::string& yaml, config::Config* saved) {
  try {
    *saved = config::parse(yaml, index);
    return true;
  } catch (const config::YamlSyntaxError&) {
    throw;
  } catch (const config::ConfigError&) {
    return false;
  }
}

// A resume continues the model the checkpoint holds: a changed model key is refused by name,
// with both values, before any tensor is read.
void check_same_model(const config::Config& here, const config::Config& saved,
                      const std::string& index) {
  std::string changed;
  for (const config::KeyChange& c : config::model_changes(saved, here))
    changed += (changed.empty() ? "key '" : "; key '") + c.key + "': " + c.before +
               " in the checkpoint, " + c.after + " in " + here.path;
  if (!changed.empty())
    throw config::ConfigError(index + ": " + changed +
                              " (a checkpoint resumes only the model it holds)");
}

// What a resumed step does follows from the step and these keys. The data: the sampler's
// position is the step times the batch, in an order the seed draws over the data's windows;
// changed, the steps read other data than the uninterrupted run would have, some of it again and
// some never. The learning rate: the schedule's shape and its end, train.steps. The update:
// AdamW's other settings and the clipping. BERT's masked
// tokens: data.mlm_probability. Dropout's masks: the seed and the rate (the micro-batch size
// changes none: each sample draws by its row in the global batch). Allowed (a run may change any on purpose, a longer
// run most of all), but said: one line each.
std::vector<std::string> resume_changes(const config::Config& here, const config::Config& saved,
                                        const std::string& index) {
  auto list = [](const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out + "]";
  };
  const std::string keys[][3] = {
      {"train.batch", std::to_string(saved.train.batch), std::to_string(here.train.batch)},
      {"train.seq_len", std::to_string(saved.train.seq_len), std::to_string(here.train.seq_len)},
      {"data.seed", std::to_string(saved.data.seed), std::to_string(here.data.seed)},
      {"data.source", saved.data.source, here.data.source},
      {"data.files", list(saved.data.files), list(here.data.files)},
      {"data.tokenizer", saved.data.tokenizer, here.data.tokenizer},
      {"data.valid_split", std::to_string(saved.data.valid_split),
       std::to_string(here.data.valid_split)},
      {"data.generated_tokens", std::to_string(saved.data.generated_tokens),
       std::to_string(here.data.generated_tokens)},
  };
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  const std::string rate_keys[][3] = {
      {"train.steps", std::to_string(saved.train.steps), std::to_string(here.train.steps)},
      {"optimizer.lr", number(saved.optimizer.lr), number(here.optimizer.lr)},
      {"schedule.warmup_steps", std::to_string(saved.schedule.warmup_steps),
       std::to_string(here.schedule.warmup_steps)},
      {"schedule.decay", saved.schedule.decay, here.schedule.decay},
      {"schedule.min_lr", number(saved.schedule.min_lr), number(here.schedule.min_lr)},
  };
  std::vector<std::string> out;
  auto say = [&](const std::string& key, const std::string& before, const std::string& after,
                 const std::string& effect) {
    if (before != after)
      out.push_back("key '" + key + "': " + before + " in the checkpoint (" + index + "), " +
                    after + " in " + here.path + ": " + effect);
  };
  for (const auto& [key, before, after] : keys)
    say(key, before, after,
        "the resumed steps read the data in another order than the uninterrupted run");
  for (const auto& [key, before, after] : rate_keys)
    if (key != "train.steps" || here.schedule.decay != "constant")  // where the decay ends
      say(key, before, after,
          "the resumed steps follow another learning-rate schedule than the uninterrupted run");
  const std::string update_keys[][3] = {
      {"optimizer.beta1", number(saved.optimizer.beta1), number(here.optimizer.beta1)},
      {"optimizer.beta2", number(saved.optimizer.beta2), number(here.optimizer.beta2)},
      {"optimizer.eps", number(saved.optimizer.eps), number(here.optimizer.eps)},
      {"optimizer.weight_decay", number(saved.optimizer.weight_decay),
       number(here.optimizer.weight_decay)},
      {"optimizer.grad_clip", number(saved.optimizer.grad_clip), number(here.optimizer.grad_clip)},
  };
  for (const auto& [key, before, after] : update_keys)
    say(key, before, after,
        "the resumed steps update the weights otherwise than the uninterrupted run");
  if (here.model.family == "bert")
    say("data.mlm_probability", number(saved.data.mlm_probability),
        number(here.data.mlm_probability),
        "the resumed steps mask other tokens than the uninterrupted run");
  say("model.dropout", number(saved.model.dropout), number(here.model.dropout),
      "the resumed steps drop at another rate than the uninterrupted run");
  // An imported network's Dropout nodes draw by the seed too (its model.dropout stays 0).
  if ((here.model.dropout > 0 && saved.model.dropout > 0) || !here.model.onnx.empty())
    say("train.seed", std::to_string(saved.train.seed), std::to_string(here.train.seed),
        "the resumed steps drop other elements than the uninterrupted run, where the network "
        "drops");
  return out;
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
  start(dir, keep, /*background=*/false);
  return finish_checkpoint();
}

void Trainer::start_checkpoint(const std::string& dir, int64_t keep) {
  start(dir, keep, /*background=*/true);
}

void Trainer::start(const std::string& dir, int64_t keep, bool background) {
  MERAK_CHECK(!pending_, "a checkpoint save is already in flight");
  comm::Communicator& host = grid_.host();
  auto p = std::make_unique<PendingCheckpoint>();
  p->dir = dir;
  p->step = steps_;
  p->keep = keep;
  p->start = Clock::now();
  p->tmp = dir + "/." + checkpoint::step_name(steps_) + ".tmp";
  std::string problem;
  try {
    if (grid_.rank() == 0) checkpoint::begin_step(dir, steps_);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(host, problem);
  // The state on the host: written from directly at once; in the background copied first
  // (training changes it meanwhile), which is all the step loop waits for then.
  p->pieces = engine_->checkpoint_pieces();
  p->scalars = engine_->checkpoint_scalars();
  p->scalars["train.step"] = std::to_string(steps_);
  char file[64];
  std::snprintf(file, sizeof file, "rank_%05d.safetensors", grid_.rank());
  p->file = file;
  if (background) {
    // Into host buffers kept from save to save (one save is in flight at a time), made and
    // faulted in when training started: the step loop waits for a plain copy.
    if (staging_touched_.joinable()) staging_touched_.join();
    if (staging_.size() != p->pieces.size()) staging_.assign(p->pieces.size(), Tensor());
    for (size_t k = 0; k < p->pieces.size(); ++k) {
      Tensor& buf = staging_[k];
      const Tensor& v = p->pieces[k].values;
      if (!buf.defined() || buf.numel() != v.numel() || buf.dtype() != v.dtype())
        buf = Tensor::empty(v.shape(), v.dtype());
      buf.view(v.shape()).copy_(v);
      p->pieces[k].values = buf;
    }
  }
  PendingCheckpoint* raw = p.get();
  auto write = [raw] {
    try {
      if (!raw->pieces.empty())
        raw->entries = checkpoint::write_pieces(raw->tmp, raw->file, raw->pieces);
    } catch (const std::exception& e) {
      raw->problem = e.what();
    }
    raw->written = true;
  };
  if (background) p->writer = std::thread(write);
  else write();
  // What the step loop waited so far: the copy (and, at once, the writing too).
  p->blocked = std::chrono::duration<double>(Clock::now() - p->start).count();
  pending_ = std::move(p);
}

void Trainer::prepare_staging() {
  for (const checkpoint::Piece& piece : engine_->checkpoint_pieces())
    staging_.push_back(Tensor::empty(piece.values.shape(), piece.values.dtype()));
  std::vector<Tensor> buffers = staging_;
  staging_touched_ = std::thread([buffers] {
    for (const Tensor& b : buffers) std::memset(b.raw_data(), 0, size_t(b.nbytes()));
  });
}

bool Trainer::checkpoint_written() {
  MERAK_CHECK(pending_, "no checkpoint save in flight");
  const std::vector<double> done =
      runtime::all_gather_doubles(grid_.host(), {pending_->written ? 1.0 : 0.0});
  for (double d : done)
    if (d == 0) return false;
  return true;
}

// agree() on a save's problem; when there is one, rank 0 first removes the unfinished step (all
// ranks are done with it: they are in this collective), which after a full disk holds the room
// the next run needs.
void Trainer::agree_or_discard(const PendingCheckpoint& p, const std::string& problem) {
  try {
    agree(grid_.host(), problem);
  } catch (const SetupError&) {
    std::error_code ec;
    if (grid_.rank() == 0) std::filesystem::remove_all(p.tmp, ec);
    throw;
  }
}

CheckpointSaved Trainer::finish_checkpoint() {
  MERAK_CHECK(pending_, "no checkpoint save in flight");
  std::unique_ptr<PendingCheckpoint> p = std::move(pending_);
  comm::Communicator& host = grid_.host();
  const auto waited = Clock::now();
  if (p->writer.joinable()) p->writer.join();
  p->blocked += std::chrono::duration<double>(Clock::now() - waited).count();
  // A write that failed anywhere: every rank stops, and `latest` stays where it was.
  agree_or_discard(*p, p->problem);
  int64_t bytes = 0;
  for (const checkpoint::PieceEntry& e : p->entries) bytes += e.byte_end - e.byte_begin;
  const auto collect = Clock::now();
  const std::vector<std::string> all = runtime::all_gather_bytes(host, encode(p->entries));
  std::string problem;
  try {
    if (grid_.rank() == 0) {
      std::vector<checkpoint::PieceEntry> entries;
      for (const std::string& text : all)
        for (const checkpoint::PieceEntry& e : decode(text)) entries.push_back(e);
      checkpoint::write_index(p->tmp, p->step, config::to_yaml(config_), p->scalars, entries);
      checkpoint::publish(p->dir, p->step);
      checkpoint::point_latest(p->dir, p->step);
      checkpoint::prune(p->dir, int(p->keep));
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree_or_discard(*p, problem);
  p->blocked += std::chrono::duration<double>(Clock::now() - collect).count();
  const double seconds = std::chrono::duration<double>(Clock::now() - p->start).count();
  const std::vector<double> totals =
      runtime::all_gather_doubles(host, {double(bytes), seconds, p->blocked});
  CheckpointSaved saved;
  saved.step_dir = p->dir + "/" + checkpoint::step_name(p->step);
  for (size_t i = 0; i < totals.size(); i += 3) {
    saved.bytes += int64_t(totals[i]);
    saved.seconds = std::max(saved.seconds, totals[i + 1]);
    saved.blocked = std::max(saved.blocked, totals[i + 2]);
  }
  return saved;
}

void Trainer::load_initial_weights(const std::string& path,
                                   const std::vector<std::string>& parameters) {
  std::string problem;
  std::vector<std::string> unused;
  try {
    const models::WeightsFile file(path);
    // The engine asks for its tensors one at a time and names what is missing.
    engine_->load_weights([&](const std::string& name) { return file.read(name); });
    if (grid_.rank() == 0) unused = file.unused(parameters);
  } catch (const std::exception& e) {
    problem = config_.path + ": key 'model.init_from': " + path + ": " + e.what();
  }
  agree(grid_.host(), problem);
  if (grid_.rank() != 0) return;
  // Tensors this model has no use for: most often a file of a larger model (more layers), which
  // a run should not start from unremarked.
  if (!unused.empty()) {
    std::string names;
    for (size_t i = 0; i < std::min<size_t>(3, unused.size()); ++i)
      names += (i ? ", " : "") + unused[i];
    log::warn("model.init_from: " + path + " holds " + std::to_string(unused.size()) +
              " tensor" + (unused.size() == 1 ? "" : "s") + " this model does not have, left " +
              "unused (" + names + (unused.size() > 3 ? ", ..." : "") + ")");
  }
  log::info("initialised from " + path + " (" + std::to_string(parameters.size()) +
            " parameters)");
}

void Trainer::resume_from(const std::string& step_dir) {
  std::string problem;
  int64_t step = 0;
  std::vector<std::string> changes;
  try {
    const checkpoint::Index index = checkpoint::read_index(step_dir);
    const std::string where = step_dir + "/index.json";
    config::Config saved;
    if (saved_config(where, index.config, &saved)) {
      check_same_model(config_, saved, where);
      changes = resume_changes(config_, saved, where);
    }
    checkpoint::check_no_other_tensors(index, parameter_names_);
    engine_->load_checkpoint(index);
    step = index.step;
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(grid_.host(), problem);
  // What would change the resumed steps, where there are any (otherwise the run says it has
  // nothing to run).
  if (grid_.rank() == 0 && step < config_.train.steps)
    for (const std::string& change : changes) log::warn(change);
  steps_ = step;
}

}  // namespace merak::train
