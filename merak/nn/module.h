// Module: the unit of the layer API. A module owns named parameters and named submodules, so
// every parameter has a hierarchical name ("blocks.3.attn.qkv.weight"). Parameters are declared
// with their shape and how to initialise them, and exist only as Meta tensors until
// materialize(): a 20B-parameter model can be built and traced with no parameter memory, and any
// shard of a parameter can be drawn alone (Philox keyed by the seed and the full name).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "merak/core/philox.h"
#include "merak/core/tensor.h"

namespace merak::nn {

struct Init {
  enum class Kind { Normal, Zeros, Ones };
  Kind kind = Kind::Normal;
  double std = 0.02;

  static Init normal(double std) { return {Kind::Normal, std}; }
  static Init zeros() { return {Kind::Zeros, 0}; }
  static Init ones() { return {Kind::Ones, 0}; }
};

struct ParameterInfo {
  std::string name;  // full hierarchical name
  Tensor value;
  Init init;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter under this module, depth first in registration order, with full names.
  std::vector<ParameterInfo> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  int64_t num_parameters() const;

  // Allocates every parameter on `device` and draws its values from Philox keyed by
  // (seed, full name); on Meta it only (re)creates shapes. Parameters require gradients.
  void materialize(uint64_t seed, Device device = Device::cpu());
  // Moves every materialised parameter to `device` (a copy, still requiring gradients, under
  // the same name), converted to `dtype`. Values are drawn on the CPU and moved, so every
  // device starts from the same weights.
  void to(Device device, DType dtype = DType::F32);

  void train(bool on = true);
  bool training() const { return training_; }
  // This module's name inside the root ("blocks.3.attn"; empty for the root).
  const std::string& path() const { return path_; }

 protected:
  // Declares a parameter; the returned reference stays valid and sees materialize()'s tensor.
  Tensor& parameter(const std::string& name, const Shape& shape, Init init);
  // Adds a submodule constructed in place: `auto& fc = add<Linear>("fc", 768, 3072);`.
  template <typename M, typename... Args>
  M& add(const std::string& name, Args&&... args) {
    auto owned = std::make_unique<M>(std::forward<Args>(args)...);
    M& ref = *owned;
    adopt(name, std::move(owned));
    return ref;
  }
  // Called by materialize() on every module, after paths are known (Dropout derives its key).
  virtual void on_materialize(uint64_t /*seed*/) {}

 private:
  struct Slot {
    std::string name;
    Tensor value;
    Init init;
  };
  void adopt(const std::string& name, std::unique_ptr<Module> child);
  void assign_paths(const std::string& path);
  void collect(const std::string& prefix, std::vector<ParameterInfo>& out) const;
  void materialize_all(uint64_t seed, Device device);

  std::deque<Slot> params_;  // a deque: references handed out stay valid as more are added
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  std::string path_;
  bool training_ = true;
};

// Numbered submodules ("blocks.0", "blocks.1", ...).
class ModuleList : public Module {
 public:
  template <typename M, typename... Args>
  M& append(Args&&... args) {
    M& m = add<M>(std::to_string(items_.size()), std::forward<Args>(args)...);
    items_.push_back(&m);
    return m;
  }
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) const { return *items_[i]; }
  template <typename M>
  M& at(size_t i) const { return static_cast<M&>(*items_[i]); }

 private:
  std::vector<Module*> items_;
};

// Initial values of one parameter (or of a shard of it: `slice` places it in the full tensor),
// exactly as materialize() draws them. Used by the runtime to build shards alone.
void initialize(const Tensor& value, const std::string& full_name, const Init& init, uint64_t seed,
                const SliceOf& slice = {});

}  // namespace merak::nn
