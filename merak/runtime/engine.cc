#include "merak/runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/core/parallel.h"
#include "merak/core/pending.h"
#include "merak/core/philox.h"
#include "merak/cuda/runtime.h"
#include "merak/graph/convert.h"
#include "merak/graph/executor.h"
#include "merak/ops/collectives.h"
#include "merak/ops/functional.h"
#include "merak/partition/plan_builder.h"
#include "merak/runtime/data_parallel.h"
#include "merak/runtime/engine_checkpoint.h"
#include "merak/runtime/engine_comm.h"
#include "merak/runtime/engine_split.h"
#include "merak/runtime/engine_params.h"
#include "merak/runtime/engine_tp.h"
#include "merak/runtime/mixed_precision.h"

namespace merak::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Boundary values travel in a dtype the communicators carry; bool masks go as i32.
DType wire_dtype(DType t) { return t == DType::Bool ? DType::I32 : t; }

// Tags of the pipeline messages: (cut, direction, boundary value). Sender and receiver list a
// cut's values in the same order (ascending value index), so the k-th matches. Two ranks meet at
// one cut per chunk (interleaved: rank r's chunk c feeds rank r + 1's chunk c), so the cut is
// told apart by its chunk: the lower model stage's chunk. The micro-batch is not in the tag:
// every channel's messages are posted in the same order on both ends (p2p_order.h proves it for
// every schedule), which is all NCCL matches by, and MPI delivers one tag's messages in order.
// So the count of micro-batches is bounded by memory, not by MPI's 32767 tags.
constexpr int kMaxPorts = 32;
int tag_of(int cut_chunk, bool grad, size_t k) {
  return (cut_chunk * 2 + (grad ? 1 : 0)) * kMaxPorts + int(k);
}

}  // namespace

struct Engine::Impl {
  // One boundary value of the stage.
  struct Port {
    std::string value;
    Shape shape;
    DType dtype = DType::F32;
    int peer = 0;        // rank in the pipeline group
    int cut_chunk = 0;   // chunk of the lower model stage of the cut (tags)
    bool grad = false;   // its gradient travels back
    int output = -1;     // SEND ports: index among the graph's outputs
  };
  // What the rank holds of a micro-batch between its forward and its backward.
  struct Micro {
    std::map<std::string, Tensor> inputs;  // data and received boundary values
    std::vector<Tensor> outputs;           // the graph's outputs
    bool recorded = false;                 // outputs carry the autograd graph
    std::vector<Tensor> out_grads;         // per SEND port: received gradients
    std::vector<Tensor> in_grads;          // per RECV port: gradients to send back
  };
  // One model stage this rank runs: the only one, or (interleaved) chunk c is model stage
  // c * stages + the rank's pipeline coordinate.
  struct Chunk {
    int index = 0;
    int model_stage = 0;
    partition::RankProgram prog;
    std::unique_ptr<graph::Executor> exec;
    std::vector<Port> recv_ports, send_ports;
    int loss_output = -1;
    bool recompute = false;   // the schedule has this chunk recompute its forward
    int last_backward = -1;   // micro-batch of the chunk's last backward in the step
    // Micro-batch of the chunk's last WeightGrad in the step; -1 when the schedule has none.
    // With WeightGrads (zero bubble) Backward leaves the parameters' gradients to them.
    int last_weight_grad = -1;
    std::map<int, Micro> micro;
    std::map<int, autograd::DeferredGrads> deferred;  // per micro-batch, Backward to WeightGrad
  };

  comm::Grid& grid;
  EngineOptions options;
  int stage = 0, stages = 1, replica = 0, replicas = 1;
  int virtual_stages = 1;           // chunks a rank; model stages = stages * virtual_stages
  comm::GridShape model_shape;      // the plan's grid: dp, model stages, tp
  // The plan's micro-batches per replica and step, and how many of them one schedule slot runs
  // together: 1, or 2 in the sub-pipelined mode (the halves, interleaved). The schedule has
  // micro_batches = plan_micro_batches / parts slots.
  int plan_micro_batches = 1, parts = 1, micro_batches = 1;
  Program program;
  bool recompute = false;                   // some chunk recomputes
  std::vector<Chunk> chunks;
  std::vector<optim::Param> params;         // every chunk's, in chunk order
  std::vector<const partition::ParamShard*> shards;  // per params entry
  std::unique_ptr<MixedPrecision> mixed;    // bf16 / f16 compute: params are its 16-bit copies
  std::unique_ptr<DataParallel> dp;         // sums over the replicas and the update
  std::map<const TensorImpl*, size_t> param_index;  // params entry of each parameter tensor
  std::unique_ptr<TpGroupCollectives> tp;  // what the stage graphs' tp ops reduce through

  // The step's message batches (p2p_batches of the program), posted at their first instruction;
  // a receive waits for its batch where it stands.
  P2PBatches batching;
  // Evaluation's program (forward_only) and its message batches; evaluate() runs it in place
  // of the step's.
  Program eval_program;
  P2PBatches eval_batching;
  struct Posted {
    comm::Communicator::SplitBatch work;  // a receive waits for work.receives
    // By receive instruction: a buffer per port of the receiving side (undefined: nothing comes).
    std::map<size_t, std::vector<Tensor>> received;
  };
  std::vector<Posted> posted;
  // Posted batches with a half not yet seen finished. A send's Work holds its tensor until then,
  // so they are tested as the step runs (release_finished): the step holds only the sends still
  // in flight, as many as the schedule runs ahead, not every micro-batch's.
  std::vector<size_t> unfinished;
  double loss_sum = 0;
  float clip_scale = 1;  // clipping's factor over the loss scale, for the optimizer step
  bool apply = true;     // whether the optimizer step applies (f16: no overflow anywhere)
  StepTimes times;
  SpanLog log;

  Impl(comm::Grid& g, const partition::Plan& plan, const EngineOptions& o);
  void check_plan(const partition::Plan& plan) const;
  void make_ports(Chunk& c);
  // The job's rank that runs the plan's rank `plan_rank` (a model stage's rank).
  int world_rank_of(int64_t plan_rank) const;
  double tp_seconds() const { return tp ? tp->seconds() : 0; }
  int tag(const Port& p, bool grad, size_t k) const { return tag_of(p.cut_chunk, grad, k); }
  // Where plan micro-batch `mb` of this replica draws its dropout masks in step `step`: placed
  // by its rows in the global batch, under the step's stream; unplaced, its own stream.
  RngPlace rng_place_of(int64_t step, int mb) const {
    const int64_t global_mb = int64_t(replica) * plan_micro_batches + mb;
    if (options.micro_batch_rows > 0)
      return {uint64_t(step), global_mb * options.micro_batch_rows, options.micro_batch_rows};
    return {uint64_t(step * int64_t(plan_micro_batches) * replicas + global_mb), 0, 0};
  }

  // Runs the program's i-th instruction (posting its message batch first if it opens one).
  void run(size_t i, int64_t step, double lr, const MicroBatchFn& batches);
  std::vector<Tensor> run_graph(Chunk& c, const std::map<std::string, Tensor>& inputs,
                                int64_t step, int mb);
  void forward(Chunk& c, int mb, int64_t step, const MicroBatchFn& batches);
  void rerun(Chunk& c, int mb, int64_t step);
  void backward(Chunk& c, int mb);
  void weight_grads(Chunk& c, int mb);
  // Hands each parameter whose gradient is final to the data-parallel strategy.
  autograd::LeafReadyFn gradient_ready() {
    return [this](const Tensor& leaf) {
      auto it = param_index.find(&leaf.impl());
      if (it != param_index.end()) dp->gradient_ready(it->second);
    };
  }
  // Posts batch b of the step's messages: the sends' values and buffers for the receives.
  void post_batch(size_t b);
  void send_activations(Chunk& c, int mb, std::vector<comm::P2P>& ops);
  void send_grads(Chunk& c, int mb, std::vector<comm::P2P>& ops);
  std::vector<Tensor> prepare_receive(Chunk& c, bool grad, std::vector<comm::P2P>& ops);
  // Waits for the batch that carries instruction i's receive and hands its values over.
  void receive(size_t i);
  // Drops the Work (and so the tensors) of every posted operation that has finished, without
  // blocking: a send is done once its peer has received it.
  void release_finished();
  void reduce_grads(EngineStepResult& r);
  void wait_posted();
  void clear_posted();  // the step's (or evaluation's) batches, none posted yet
  // Whether this rank counts parameter i's shard for the job (the norm) and writes it (with
  // replica 0): tp rank 0 for replicated tensors, the first stage for tied ones.
  bool counts(size_t i) const;
};

Engine::Impl::Impl(comm::Grid& g, const partition::Plan& plan, const EngineOptions& o)
    : grid(g), options(o), log(Clock::now()) {
  std::vector<optim::Param> masters;  // mixed precision: the f32 parameters, in params' order
  stage = grid.coord().pp;
  stages = grid.shape().pp;
  replica = grid.coord().dp;
  replicas = grid.shape().dp;
  virtual_stages = std::max(1, options.virtual_stages);
  model_shape = grid.shape();
  model_shape.pp = stages * virtual_stages;
  check_plan(plan);
  plan_micro_batches = int(plan.micro_batches());
  parts = options.tp_subpipeline ? 2 : 1;
  MERAK_CHECK(plan_micro_batches % parts == 0, "sub-pipelined tensor parallelism runs the plan's ",
              "micro-batches in pairs, the plan has ", plan_micro_batches);
  micro_batches = plan_micro_batches / parts;

  ScheduleOptions so;
  so.recompute = options.recompute;
  so.virtual_stages = virtual_stages;
  program = make_schedule(options.schedule, stage, stages, micro_batches, so);
  batching = p2p_batches(program);
  eval_program = forward_only(stage, stages, micro_batches, virtual_stages);
  eval_batching = p2p_batches(eval_program);

  chunks.resize(size_t(virtual_stages));
  for (int c = 0; c < virtual_stages; ++c) {
    Chunk& chunk = chunks[size_t(c)];
    chunk.index = c;
    chunk.model_stage = c * stages + stage;
    const comm::GridCoord& me = grid.coord();
    chunk.prog = plan.ranks(comm::grid_rank(model_shape, {me.dp, chunk.model_stage, me.tp}));
    chunk.exec = std::make_unique<graph::Executor>(stage_model(chunk.prog, options.seed),
                                                   options.seed, options.device);
    if (options.compute != DType::F32)
      for (const optim::Param& m : optim::make_params(chunk.exec->cast_parameters(options.compute)))
        masters.push_back(m);
    std::map<std::string, const partition::ParamShard*> by_name;
    for (const partition::ParamShard& s : chunk.prog.params()) by_name[s.name()] = &s;
    for (const optim::Param& p : optim::make_params(chunk.exec->parameters())) {
      params.push_back(p);
      shards.push_back(by_name.at(p.name));
    }
  }
  for (const Instruction& in : program) {
    MERAK_CHECK(in.chunk >= 0 && in.chunk < virtual_stages, "rank ", grid.rank(), ": ",
                to_string(in), " names chunk ", in.chunk, " of ", virtual_stages);
    if (in.op == Op::Recompute) chunks[size_t(in.chunk)].recompute = recompute = true;
    if (in.op == Op::Backward) chunks[size_t(in.chunk)].last_backward = in.micro_batch;
    if (in.op == Op::WeightGrad) chunks[size_t(in.chunk)].last_weight_grad = in.micro_batch;
  }
  if (options.compute != DType::F32) {
    std::vector<Tensor> copies;
    for (const optim::Param& p : params) copies.push_back(p.value);
    mixed = std::make_unique<MixedPrecision>(std::move(masters), std::move(copies),
                                             options.compute, options.loss_scale);
  }
  dp = make_data_parallel(grid.dp(), params, options, mixed.get());
  // The AdamW moments are made (zeros) now rather than at the first update: a rank short of
  // memory fails at start-up, not after its first step, and a resume reads into memory that is
  // already in place (on a virtual machine, a fresh page's first touch costs more than its read).
  dp->adamw().allocate_state();
  for (size_t i = 0; i < params.size(); ++i) param_index[&params[i].value.impl()] = i;
  for (Chunk& c : chunks) make_ports(c);

  if (grid.shape().tp > 1) {
    // The plan names a tp group per model stage; this rank's chunks all use its one tp group.
    std::vector<std::string> names;
    for (const Chunk& c : chunks)
      names.push_back(partition::tp_group_name(c.model_stage, grid.coord().dp));
    tp = std::make_unique<TpGroupCollectives>(grid.tp(), names);
  }
  // Spans are measured from one instant on every rank.
  grid.host().barrier();
  log = SpanLog(Clock::now());
}

void Engine::Impl::check_plan(const partition::Plan& plan) const {
  const comm::GridShape& s = grid.shape();
  const partition::Layout& l = plan.layout();
  // Interleaved: the plan cuts the model into stages * virtual_stages model stages, laid out as
  // if each had its own ranks; rank (d, r, t) runs model stages r, r + stages, ...
  MERAK_CHECK(l.dp() == s.dp && l.pp() == model_shape.pp && l.tp() == s.tp, "the plan is for dp ",
              l.dp(), ", pp ", l.pp(), ", tp ", l.tp(), " but the job's grid is ", s.str(),
              virtual_stages > 1 ? " with " + std::to_string(virtual_stages) + " virtual stages"
                                 : std::string());
  MERAK_CHECK(plan.ranks_size() == model_shape.size(), "the plan has ", plan.ranks_size(),
              " rank programs for ", model_shape.size(), " model-stage ranks");
  const comm::GridCoord& c = grid.coord();
  for (int k = 0; k < virtual_stages; ++k) {
    const int model_stage = k * stages + c.pp;
    const int at = comm::grid_rank(model_shape, {c.dp, model_stage, c.tp});
    const partition::RankProgram& p = plan.ranks(at);
    MERAK_CHECK(p.rank() == at && p.dp() == c.dp && p.pp() == model_stage && p.tp() == c.tp,
                "plan entry ", at, " is rank ", p.rank(), " (dp ", p.dp(), ", pp ", p.pp(),
                ", tp ", p.tp(), "), not this rank's chunk ", k, " (dp ", c.dp, ", pp ",
                model_stage, ", tp ", c.tp, ")");
  }
  MERAK_CHECK(plan.micro_batches() >= 1, "the plan has ", plan.micro_batches(), " micro-batches");
  // MPI guarantees tags up to 32767.
  MERAK_CHECK(tag_of(virtual_stages - 1, true, kMaxPorts - 1) <= 32767, "the engine tags ",
              "pipeline messages for at most ", 32768 / (2 * kMaxPorts), " virtual stages, the ",
              "job has ", virtual_stages);
  MERAK_CHECK(!options.tp_subpipeline || grid.shape().tp > 1, "sub-pipelined tensor "
              "parallelism overlaps the tp all-reduces: it needs tp > 1, the grid has tp ",
              grid.shape().tp);
  MERAK_CHECK((options.schedule == ScheduleKind::Interleaved1F1B) == (virtual_stages > 1),
              "the interleaved schedule and virtual stages go together: schedule ",
              to_string(options.schedule), " with ", virtual_stages, " virtual stages");
  MERAK_CHECK(virtual_stages == 1 || !options.tp_subpipeline,
              "sub-pipelined tensor parallelism is not combined with virtual stages");
}

int Engine::Impl::world_rank_of(int64_t plan_rank) const {
  MERAK_CHECK(plan_rank >= 0 && plan_rank < model_shape.size(), "rank ", grid.rank(),
              ": the plan names rank ", plan_rank, " outside its ", model_shape.size());
  const comm::GridCoord m = comm::grid_coord(model_shape, int(plan_rank));
  return comm::grid_rank(grid.shape(), {m.dp, m.pp % stages, m.tp});
}

void Engine::Impl::make_ports(Chunk& c) {
  const partition::RankProgram& prog = c.prog;
  const std::vector<int>& members = grid.pp().world_ranks();
  auto pp_rank = [&](int64_t world) {
    auto it = std::find(members.begin(), members.end(), int(world));
    MERAK_CHECK(it != members.end(), "rank ", grid.rank(), ": boundary peer ", world,
                " is not in its pipeline group");
    return int(it - members.begin());
  };
  std::map<std::string, int> output_index;
  for (int i = 0; i < prog.graph().outputs_size(); ++i)
    output_index[prog.graph().outputs(i).name()] = i;
  for (const partition::Boundary& b : prog.boundaries()) {
    const int peer_stage = comm::grid_coord(model_shape, int(b.peer())).pp;
    // Tags tell two ranks' cuts apart by chunk, which holds when cuts join neighbouring model
    // stages (all the partitioner makes); interleaving relies on it.
    MERAK_CHECK(virtual_stages == 1 || std::abs(peer_stage - c.model_stage) == 1, "rank ",
                grid.rank(), ": boundary value '", b.value(), "' joins model stages ",
                c.model_stage, " and ", peer_stage, ", not neighbours");
    Port p;
    p.cut_chunk = std::min(peer_stage, c.model_stage) / stages;
    p.value = b.value();
    p.shape = graph::fixed_shape(b.type(), "boundary value '" + b.value() + "'");
    // A slot of the sub-pipelined mode carries its plan micro-batches side by side.
    MERAK_CHECK(parts == 1 || !p.shape.empty(), "rank ", grid.rank(), ": boundary value '",
                b.value(), "' is a scalar; sub-pipelined tensor parallelism needs every value ",
                "crossing a pipeline cut to have the micro-batch as dim 0");
    if (parts > 1) p.shape[0] *= parts;
    p.dtype = graph::from_proto(b.type().dtype());
    if (is_floating(p.dtype)) p.dtype = options.compute;  // activations in the compute dtype
    p.peer = pp_rank(world_rank_of(b.peer()));
    p.grad = b.has_grad();
    if (b.direction() == partition::Boundary::SEND) {
      MERAK_CHECK(output_index.count(b.value()), "rank ", grid.rank(), ": sent value '",
                  b.value(), "' is not an output of the stage graph");
      p.output = output_index.at(b.value());
      c.send_ports.push_back(p);
    } else {
      c.recv_ports.push_back(p);
    }
  }
  MERAK_CHECK(c.send_ports.size() <= kMaxPorts && c.recv_ports.size() <= kMaxPorts, "rank ",
              grid.rank(), ": more than ", kMaxPorts, " values cross a pipeline cut");
  std::set<std::string> sent;
  for (const Port& p : c.send_ports) sent.insert(p.value);
  for (int i = 0; i < prog.graph().outputs_size(); ++i)
    if (!sent.count(prog.graph().outputs(i).name())) {
      MERAK_CHECK(c.loss_output < 0, "rank ", grid.rank(), ": the stage graph has more than one ",
                  "output that is not sent on ('", prog.graph().outputs(c.loss_output).name(),
                  "', '", prog.graph().outputs(i).name(), "')");
      c.loss_output = i;
    }
  const int last = model_shape.pp - 1;
  MERAK_CHECK((c.loss_output >= 0) == (c.model_stage == last), "rank ", grid.rank(),
              " (model stage ", c.model_stage, " of ", last + 1, ") ",
              c.loss_output >= 0 ? "computes" : "does not compute", " the loss");
}

void Engine::Impl::forward(Chunk& c, int mb, int64_t step, const MicroBatchFn& batches) {
  Micro& m = c.micro[mb];
  if (c.prog.data_inputs_size() > 0) {
    const std::vector<std::string> names(c.prog.data_inputs().begin(),
                                         c.prog.data_inputs().end());
    // The slot's plan micro-batches, side by side along the batch (run_graph cuts them apart).
    std::map<std::string, std::vector<Tensor>> pieces;
    for (int k = 0; k < parts; ++k) {
      const int64_t global_mb = int64_t(replica) * plan_micro_batches + mb * parts + k;
      std::map<std::string, Tensor> data = batches(step, global_mb, names);
      for (const std::string& name : names) {
        auto it = data.find(name);
        MERAK_CHECK(it != data.end() && it->second.defined(), "the batch source gave no '", name,
                    "' for micro-batch ", global_mb);
        // Staged to the rank's device (through pinned host memory on a GPU).
        pieces[name].push_back(options.device.is_cpu() ? it->second
                                                       : it->second.to(options.device));
      }
    }
    for (auto& [name, p] : pieces) m.inputs[name] = parts == 1 ? p[0] : ops::concat(p, 0);
  }
  if (c.recompute) {
    autograd::NoGradGuard no_grad;
    m.outputs = run_graph(c, m.inputs, step, mb);
    m.recorded = false;
  } else {
    m.outputs = run_graph(c, m.inputs, step, mb);
    m.recorded = true;
  }
  if (c.loss_output >= 0) loss_sum += m.outputs[size_t(c.loss_output)].item();
}

void Engine::Impl::rerun(Chunk& c, int mb, int64_t step) {
  Micro& m = c.micro.at(mb);
  m.outputs = run_graph(c, m.inputs, step, mb);  // the same dropout masks as the forward
  m.recorded = true;
}

std::vector<Tensor> Engine::Impl::run_graph(Chunk& c, const std::map<std::string, Tensor>& inputs,
                                            int64_t step, int mb) {
  if (parts == 1) {
    set_rng_place(rng_place_of(step, mb));
    return c.exec->run(inputs);
  }
  // Each half is one of the plan's micro-batches, drawing its own rows' dropout masks.
  ops::TpScope defer(tp.get(), /*defer=*/true);
  const std::vector<std::vector<Tensor>> halves =
      c.exec->run_parts(split_halves(inputs, grid.rank()), [&](size_t k) {
        set_rng_place(rng_place_of(step, mb * parts + int(k)));
      });
  return join_halves(halves, c.loss_output);
}

void Engine::Impl::backward(Chunk& c, int mb) {
  auto it = c.micro.find(mb);
  MERAK_CHECK(it != c.micro.end() && it->second.recorded, "rank ", grid.rank(),
              ": backward of micro-batch ", mb, " (chunk ", c.index, ") without its recorded ",
              "forward");
  Micro& m = it->second;
  std::vector<Tensor> roots, grads;
  if (c.loss_output >= 0) {
    const Tensor& loss = m.outputs[size_t(c.loss_output)];
    roots.push_back(loss);
    const double scale = mixed ? mixed->loss_scale() : 1.0;
    grads.push_back(Tensor::full(loss.shape(), scale / double(plan_micro_batches * replicas),
                                 loss.dtype(), loss.device()));
  }
  for (size_t k = 0; k < c.send_ports.size(); ++k) {
    const Tensor& out = m.outputs[size_t(c.send_ports[k].output)];
    if (!c.send_ports[k].grad || !autograd::needs_grad(out)) continue;
    roots.push_back(out);
    grads.push_back(m.out_grads.at(k));
  }
  std::optional<ops::TpScope> defer;  // the halves' backward all-reduces, posted
  if (options.tp_subpipeline) defer.emplace(tp.get(), /*defer=*/true);
  if (!roots.empty() && c.last_weight_grad >= 0) {
    // Only what other stages wait for now (activation gradients); the parameters' gradients
    // when the schedule's WeightGrad comes.
    autograd::backward(roots, grads, [this](const Tensor& leaf) {
      return param_index.count(&leaf.impl()) > 0;
    }, c.deferred[mb]);
  } else if (!roots.empty() && dp->watches_backward() && mb == c.last_backward) {
    // The chunk's last backward of the step: each of its parameters' gradients is final once
    // backward has passed it, so its bucket can start its all-reduce while the rest computes.
    autograd::backward(roots, grads, gradient_ready());
  } else if (!roots.empty()) {
    autograd::backward(roots, grads);
  }
  wait_all_pending();
  m.in_grads.clear();
  for (const Port& p : c.recv_ports) {
    if (!p.grad) {
      m.in_grads.emplace_back();
      continue;
    }
    Tensor g = m.inputs.at(p.value).grad();
    m.in_grads.push_back(g.defined() ? g.contiguous()
                                     : Tensor::zeros(p.shape, p.dtype, options.device));
  }
  m.outputs.clear();
  m.out_grads.clear();
  m.inputs.clear();
  if (c.recv_ports.empty()) c.micro.erase(it);
}

void Engine::Impl::post_batch(size_t b) {
  Posted& p = posted[b];
  std::vector<comm::P2P> ops;
  for (size_t i : batching.batches[b]) {
    const Instruction& in = program[i];
    Chunk& c = chunks[size_t(in.chunk)];
    switch (in.op) {
      case Op::SendActivation: send_activations(c, in.micro_batch, ops); break;
      case Op::SendGrad: send_grads(c, in.micro_batch, ops); break;
      case Op::RecvActivation: p.received[i] = prepare_receive(c, /*grad=*/false, ops); break;
      case Op::RecvGrad: p.received[i] = prepare_receive(c, /*grad=*/true, ops); break;
      default: MERAK_FAIL("rank ", grid.rank(), ": ", to_string(in), " in a message batch");
    }
  }
  p.work = grid.pp().ibatch_split(ops);
  unfinished.push_back(b);
}

void Engine::Impl::send_activations(Chunk& c, int mb, std::vector<comm::P2P>& ops) {
  Micro& m = c.micro.at(mb);
  for (size_t k = 0; k < c.send_ports.size(); ++k) {
    const Port& p = c.send_ports[k];
    Tensor t = m.outputs[size_t(p.output)].detach();
    if (t.dtype() != wire_dtype(t.dtype())) {
      autograd::NoGradGuard no_grad;
      t = ops::cast(t, wire_dtype(t.dtype()));
    }
    ops.push_back({comm::P2P::Send, t.contiguous(), p.peer, tag(p, false, k)});
  }
  if (!m.recorded) m.outputs.clear();  // a recomputing stage keeps only its inputs
}

void Engine::Impl::send_grads(Chunk& c, int mb, std::vector<comm::P2P>& ops) {
  auto it = c.micro.find(mb);
  MERAK_CHECK(it != c.micro.end() && it->second.in_grads.size() == c.recv_ports.size(), "rank ",
              grid.rank(), ": gradients of micro-batch ", mb, " (chunk ", c.index,
              ") sent before its backward");
  for (size_t k = 0; k < c.recv_ports.size(); ++k)
    if (c.recv_ports[k].grad)
      ops.push_back({comm::P2P::Send, it->second.in_grads[k], c.recv_ports[k].peer,
                     tag(c.recv_ports[k], true, k)});
  c.micro.erase(it);  // the batch's Work keeps the gradients alive
}

std::vector<Tensor> Engine::Impl::prepare_receive(Chunk& c, bool grad,
                                                  std::vector<comm::P2P>& ops) {
  std::vector<Tensor> bufs;
  // Activations come in on the receive ports, gradients on the send ports' way back.
  const std::vector<Port>& ports = grad ? c.send_ports : c.recv_ports;
  for (size_t k = 0; k < ports.size(); ++k) {
    const Port& p = ports[k];
    if (grad && !p.grad) {
      bufs.emplace_back();
      continue;
    }
    bufs.push_back(Tensor::empty(p.shape, grad ? p.dtype : wire_dtype(p.dtype), options.device));
    ops.push_back({comm::P2P::Recv, bufs.back(), p.peer, tag(p, grad, k)});
  }
  return bufs;
}

void Engine::Impl::receive(size_t i) {
  Posted& p = posted[size_t(batching.batch_of[i])];
  p.work.receives.wait();
  std::vector<Tensor> bufs = std::move(p.received.at(i));
  p.received.erase(i);
  const Instruction& in = program[i];
  Chunk& c = chunks[size_t(in.chunk)];
  Micro& m = c.micro[in.micro_batch];
  if (in.op == Op::RecvGrad) {
    m.out_grads = std::move(bufs);
    return;
  }
  for (size_t k = 0; k < c.recv_ports.size(); ++k) {
    const Port& port = c.recv_ports[k];
    Tensor t = bufs[k];
    if (t.dtype() != port.dtype) t = ops::cast(t, port.dtype);
    if (port.grad) t.set_requires_grad(true);  // a leaf: its .grad is what goes back
    m.inputs[port.value] = t;
  }
}

void Engine::Impl::release_finished() {
  // Both halves: under NCCL a batch of sends alone is the `receives` handle.
  auto finished = [&](size_t b) {
    comm::Communicator::SplitBatch& w = posted[b].work;
    const bool sends = w.sends.test();
    return w.receives.test() && sends;
  };
  unfinished.erase(std::remove_if(unfinished.begin(), unfinished.end(), finished),
                   unfinished.end());
}

void Engine::Impl::wait_posted() {
  for (Posted& p : posted) {
    p.work.receives.wait();
    p.work.sends.wait();
  }
  posted.clear();
  unfinished.clear();
}

void Engine::Impl::clear_posted() {
  posted.clear();
  posted.resize(batching.batches.size());
  unfinished.clear();
}

void Engine::Impl::reduce_grads(EngineStepResult& r) {
  // Data-parallel sums first when they overlapped backward (summing over replicas and then over
  // the tied first and last stage is the same total as the other way round).
  r.overlapped_buckets = dp->finish_backward();
  // Every local shard gets a gradient (zeros where backward reached none), contiguous, so the
  // sums below line up element by element on every member.
  std::vector<Tensor> grads, tied;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].value.grad();
    const Tensor& v = params[i].value;
    if (!g.defined()) g = Tensor::zeros(v.shape(), v.dtype(), v.device());
    if (!g.is_contiguous()) g = g.contiguous();
    // The tied sum below writes in place; the buckets' sums may be the replicas' shared copy.
    if (shards[i]->tied_ranks_size() > 0 && dp->shares_gradients()) g = g.clone();
    params[i].value.set_grad(g);
    grads.push_back(g);
    if (shards[i]->tied_ranks_size() > 0) tied.push_back(g);
  }
  if (!tied.empty()) {
    comm::Communicator* group = grid.tied();
    for (size_t i = 0; i < params.size(); ++i)
      for (int64_t plan_peer : shards[i]->tied_ranks()) {
        const int peer = world_rank_of(plan_peer);
        const std::vector<int>& members = group ? group->world_ranks() : std::vector<int>{};
        MERAK_CHECK(std::count(members.begin(), members.end(), peer) == 1, "rank ",
                    grid.rank(), ": parameter '", params[i].name, "' is tied with rank ", peer,
                    ", outside this rank's tied group (first and last stage)");
      }
    if (group->size() > 1) all_reduce_buckets(*group, tied, options.bucket_bytes);
  }
  dp->reduce(grads);

  // The norm counts each shard once (counts), and one replica: the replicas share the
  // (identical) summed gradients out, parameter by parameter (under ZeRO-1 each replica has its
  // own segment, which are disjoint).
  auto counted = [&](size_t i) { return counts(i); };
  const double sq = dp->sum_of_squares(grads, counted);
  const bool reports_loss = chunks.back().loss_output >= 0 && grid.coord().tp == 0;
  // The loss, the squares and (f16) whether this rank's gradients overflowed, from every rank:
  // a step skipped anywhere is skipped everywhere.
  const std::vector<double> all = all_gather_doubles(
      grid.host(), {reports_loss ? loss_sum : 0.0, sq, mixed && mixed->overflowed() ? 1.0 : 0.0});
  double loss = 0, total_sq = 0;
  bool overflow = false;
  for (size_t i = 0; i < all.size(); i += 3) {
    loss += all[i];
    total_sq += all[i + 1];
    overflow = overflow || all[i + 2] != 0;
  }
  const double scale = mixed ? mixed->loss_scale() : 1.0;  // this step's, before update()
  r.loss = loss / double(plan_micro_batches * replicas);
  r.grad_norm = std::sqrt(total_sq) / scale;
  apply = mixed ? mixed->update(overflow, &r.event) : true;
  r.skipped = !apply;
  r.loss_scale = mixed ? mixed->loss_scale() : 0.0;
  // Applied by the optimizer step, with the loss scale divided out in the same pass.
  clip_scale = float(double(optim::clip_coefficient(r.grad_norm, options.grad_clip)) / scale);
}

bool Engine::Impl::counts(size_t i) const {
  const partition::ParamShard& s = *shards[i];
  if (s.split() == "replicated" && grid.coord().tp != 0) return false;
  for (int64_t peer : s.tied_ranks())
    if (world_rank_of(peer) < grid.rank()) return false;
  return true;
}

void Engine::Impl::weight_grads(Chunk& c, int mb) {
  auto it = c.deferred.find(mb);
  if (it == c.deferred.end()) return;  // its backward had no roots
  // The chunk's last parameter gradients of the step: buckets start as they complete.
  const bool last = dp->watches_backward() && mb == c.last_weight_grad;
  autograd::run_deferred(it->second, last ? gradient_ready() : autograd::LeafReadyFn());
  c.deferred.erase(it);
}

void Engine::Impl::run(size_t i, int64_t step, double lr, const MicroBatchFn& batches) {
  const Instruction& in = program[i];
  release_finished();
  const auto start = Clock::now();
  const double tp_before = tp_seconds();
  const int b = batching.batch_of[i];
  if (b >= 0 && batching.batches[size_t(b)].front() == i) post_batch(size_t(b));
  Chunk& chunk = chunks[size_t(in.chunk)];
  const char* category = "compute";
  switch (in.op) {
    case Op::Forward: forward(chunk, in.micro_batch, step, batches); break;
    case Op::Recompute:
      rerun(chunk, in.micro_batch, step);
      category = "recompute";
      break;
    case Op::Backward: backward(chunk, in.micro_batch); break;
    case Op::WeightGrad: weight_grads(chunk, in.micro_batch); break;
    case Op::SendActivation:  // posted with its batch
    case Op::SendGrad: category = "p2p"; break;
    case Op::RecvActivation:
    case Op::RecvGrad:
      receive(i);
      category = "wait";
      break;
    case Op::ReduceGrads: category = "collective"; break;  // done by step(): it fills the result
    case Op::OptimizerStep:
      if (apply) dp->step(lr, clip_scale);
      category = "update";
      break;
  }
  const auto end = Clock::now();
  const double dt = seconds(start, end), tp = tp_seconds() - tp_before;
  const std::string c = category;
  if (c == "compute" || c == "recompute" || c == "update") {
    times.compute += dt - tp;
    times.collectives += tp;
    if (c == "recompute") times.recompute += dt - tp;
  } else if (c == "wait" || c == "p2p") {
    times.p2p_wait += dt;
  }
  if (options.trace && in.op != Op::ReduceGrads) log.add(to_string(in), c, start, end);
}

Engine::Engine(comm::Grid& grid, const partition::Plan& plan, const EngineOptions& options)
    : impl_(std::make_unique<Impl>(grid, plan, options)) {}

Engine::~Engine() = default;

EngineStepResult Engine::step(int64_t step, double lr, const MicroBatchFn& batches) {
  Impl& e = *impl_;
  const auto start = Clock::now();
  e.times = StepTimes();
  if (e.options.trace) e.log.begin_step();
  e.loss_sum = 0;
  const int64_t posted_before = e.tp ? e.tp->posted() : 0;
  // The stage graphs' tp ops reduce over this rank's tp group while the step runs.
  ops::TpScope tp_scope(e.tp.get());
  for (const optim::Param& p : e.params) p.value.set_grad(Tensor());
  e.dp->begin_step();  // the last step's summed gradients may be views of a shared window
  EngineStepResult r;
  e.clear_posted();
  for (size_t i = 0; i < e.program.size(); ++i) {
    const Instruction& in = e.program[i];
    if (in.op == Op::ReduceGrads) {
      const auto t0 = Clock::now();
      e.reduce_grads(r);
      const auto t1 = Clock::now();
      e.times.collectives += seconds(t0, t1);
      if (e.options.trace) e.log.add("AR", "collective", t0, t1);
      continue;
    }
    e.run(i, step, lr, batches);
  }
  for (const Impl::Chunk& c : e.chunks) {
    MERAK_CHECK(c.micro.empty(), "rank ", e.grid.rank(), ": ", c.micro.size(),
                " micro-batches still held by chunk ", c.index, " at the end of the step (a "
                "schedule without their backward?)");
    MERAK_CHECK(c.deferred.empty(), "rank ", e.grid.rank(), ": ", c.deferred.size(),
                " micro-batches of chunk ", c.index, " still owe their parameter gradients at "
                "the end of the step (a schedule without their WeightGrad?)");
  }
  const auto t0 = Clock::now();
  e.wait_posted();
  // A GPU runs behind the host: the step ends when its work does.
  if (e.options.device.is_cuda()) cuda::synchronize(e.options.device.index);
  e.times.p2p_wait += seconds(t0, Clock::now());
  e.times.total = seconds(start, Clock::now());
  r.times = e.times;
  r.deferred_all_reduces = e.tp ? e.tp->posted() - posted_before : 0;
  r.ranks = gather_times(e.grid.host(), e.times);
  return r;
}

double Engine::evaluate(int64_t index, const MicroBatchFn& batches) {
  Impl& e = *impl_;
  autograd::NoGradGuard no_grad;
  ops::TpScope tp_scope(e.tp.get());
  // The instructions run() follows become evaluation's for the call; dropout is off, and the
  // step's timings and trace are left as they were.
  struct Swap {
    Impl& e;
    StepTimes times;
    bool trace;
    explicit Swap(Impl& impl) : e(impl), times(impl.times), trace(impl.options.trace) {
      swap_programs(/*training=*/false);
      e.options.trace = false;
    }
    ~Swap() {
      swap_programs(/*training=*/true);
      e.times = times;
      e.options.trace = trace;
      e.clear_posted();
      for (Impl::Chunk& c : e.chunks) c.micro.clear();
    }
    void swap_programs(bool training) {
      std::swap(e.program, e.eval_program);
      std::swap(e.batching, e.eval_batching);
      for (Impl::Chunk& c : e.chunks) c.exec->set_training(training);
    }
  } swap(e);
  e.loss_sum = 0;
  e.clear_posted();
  for (size_t i = 0; i < e.program.size(); ++i) {
    e.run(i, index, 0.0, batches);
    // A micro-batch's values are done with once its activations are posted (the message batch
    // keeps them), or at once on the last model stage.
    const Instruction& in = e.program[i];
    Impl::Chunk& c = e.chunks[size_t(in.chunk)];
    if (in.op == Op::SendActivation || (in.op == Op::Forward && c.send_ports.empty()))
      c.micro.erase(in.micro_batch);
  }
  e.wait_posted();
  if (e.options.device.is_cuda()) cuda::synchronize(e.options.device.index);
  const bool reports_loss = e.chunks.back().loss_output >= 0 && e.grid.coord().tp == 0;
  double loss = 0;
  for (double l : all_gather_doubles(e.grid.host(), {reports_loss ? e.loss_sum : 0.0})) loss += l;
  return loss / double(e.plan_micro_batches * e.replicas);
}

const partition::RankProgram& Engine::program(int chunk) const {
  MERAK_CHECK(chunk >= 0 && chunk < int(impl_->chunks.size()), "engine: no chunk ", chunk, " of ",
              impl_->chunks.size());
  return impl_->chunks[size_t(chunk)].prog;
}
int Engine::chunks() const { return int(impl_->chunks.size()); }
std::string Engine::dp_transport() const {
  return impl_->dp->transport();
}
std::string Engine::dp_parameters() const { return impl_->dp->parameters(); }
std::string Engine::tp_transport() const {
  return impl_->grid.tp_transport();
}
int64_t Engine::shared_memory_bytes() const {
  return impl_->dp->shared_bytes() + impl_->grid.tp().shared_bytes();
}
std::vector<std::string> Engine::data_inputs() const {
  std::set<std::string> names;
  for (const Impl::Chunk& c : impl_->chunks)
    names.insert(c.prog.data_inputs().begin(), c.prog.data_inputs().end());
  return {names.begin(), names.end()};
}
const Program& Engine::instructions() const { return impl_->program; }
bool Engine::recomputes() const { return impl_->recompute; }
int Engine::micro_batches() const { return impl_->micro_batches; }
const std::vector<TraceSpan>& Engine::spans() const { return impl_->log.spans(); }

std::vector<checkpoint::Piece> Engine::checkpoint_pieces() {
  Impl& e = *impl_;
  const std::vector<optim::Param>& values = e.mixed ? e.mixed->master_params() : e.params;
  std::vector<checkpoint::Piece> out;
  for (size_t i = 0; i < values.size(); ++i)
    if (e.replica == 0 && e.counts(i))
      add_state_pieces(values[i].name, *e.shards[i], values[i].value, 0, &out);
  const bool sharded = e.dp->state_sharded();
  for (const OptimizerSlice& s :
       optimizer_slices(e.dp->adamw(), e.dp->adamw_pieces())) {
    if (!(sharded || e.replica == 0) || !e.counts(s.param)) continue;
    const std::string& name = values[s.param].name;
    add_state_pieces(name + ".exp_avg", *e.shards[s.param], s.exp_avg, s.begin, &out);
    add_state_pieces(name + ".exp_avg_sq", *e.shards[s.param], s.exp_avg_sq, s.begin, &out);
  }
  return out;
}

std::map<std::string, std::string> Engine::checkpoint_scalars() const {
  std::map<std::string, std::string> s;
  s["optimizer.steps"] = std::to_string(impl_->dp->adamw().steps_taken());
  if (const optim::LossScaler* scaler = impl_->mixed ? impl_->mixed->loss_scaler() : nullptr) {
    const optim::LossScalerState st = scaler->state();
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.9g", double(st.scale));
    s["loss_scale.scale"] = scale;
    s["loss_scale.clean_steps"] = std::to_string(st.clean_steps);
    s["loss_scale.hysteresis_left"] = std::to_string(st.hysteresis_left);
    s["loss_scale.steps"] = std::to_string(st.steps);
    s["loss_scale.skipped_steps"] = std::to_string(st.skipped_steps);
  }
  return s;
}

void Engine::load_checkpoint(const checkpoint::Index& index) {
  Impl& e = *impl_;
  const std::vector<optim::Param>& values = e.mixed ? e.mixed->master_params() : e.params;
  // Every parameter, then the moments (every element of them is read, which read_regions
  // checks). Host state is read in one go, straight into place; device state in
  // batches through host tensors of about kBatchBytes, copied over after each.
  constexpr int64_t kBatchBytes = int64_t(512) << 20;
  std::vector<StateRead> batch;
  int64_t batch_bytes = 0;
  auto flush = [&] {
    std::vector<checkpoint::RegionRead> reads;
    for (const StateRead& r : batch) reads.push_back(r.read);
    checkpoint::read_regions(index, reads);
    for (const StateRead& r : batch)
      if (r.place.defined()) r.place.copy_(r.read.out);
    batch.clear();
    batch_bytes = 0;
  };
  auto add = [&](const std::string& name, const partition::ParamShard& shard,
                 const Tensor& values, int64_t begin) {
    add_state_reads(name, shard, values, begin, &batch);
    batch_bytes += values.nbytes();
    if (!e.options.device.is_cpu() && batch_bytes >= kBatchBytes) flush();
  };
  for (size_t i = 0; i < values.size(); ++i) add(values[i].name, *e.shards[i], values[i].value, 0);
  for (const OptimizerSlice& s :
       optimizer_slices(e.dp->adamw(), e.dp->adamw_pieces())) {
    const std::string& name = values[s.param].name;
    add(name + ".exp_avg", *e.shards[s.param], s.exp_avg, s.begin);
    add(name + ".exp_avg_sq", *e.shards[s.param], s.exp_avg_sq, s.begin);
  }
  flush();
  if (e.mixed) e.mixed->masters_to_copies();
  e.dp->adamw().set_steps_taken(checkpoint::state_count(index, "optimizer.steps"));
  if (optim::LossScaler* scaler = e.mixed ? e.mixed->loss_scaler() : nullptr) {
    if (index.state.count("loss_scale.scale")) {
      optim::LossScalerState st;
      st.scale = checkpoint::state_float(index, "loss_scale.scale");
      st.clean_steps = checkpoint::state_count(index, "loss_scale.clean_steps");
      st.hysteresis_left = checkpoint::state_count(index, "loss_scale.hysteresis_left");
      st.steps = checkpoint::state_count(index, "loss_scale.steps");
      st.skipped_steps = checkpoint::state_count(index, "loss_scale.skipped_steps");
      scaler->load_state(st);
    }
  }
}

void Engine::load_weights(
    const std::function<std::optional<Tensor>(const std::string&)>& full) {
  Impl& e = *impl_;
  const std::vector<optim::Param>& values = e.mixed ? e.mixed->master_params() : e.params;
  for (size_t i = 0; i < values.size(); ++i) {
    const partition::ParamShard& shard = *e.shards[i];
    const Shape want(shard.full_shape().begin(), shard.full_shape().end());
    const std::optional<Tensor> whole = full(values[i].name);
    MERAK_CHECK(whole.has_value(), "no weights for '", values[i].name, "' (of shape ",
                shape_str(want), ")");
    MERAK_CHECK(whole->shape() == want, "'", values[i].name, "' has shape ",
                shape_str(whole->shape()), " there, ", shape_str(want), " here");
    const Tensor f32 = whole->dtype() == DType::F32 ? *whole : ops::cast(*whole, DType::F32);
    values[i].value.copy_(materialize_shard(shard, e.options.seed, f32));
  }
  if (e.mixed) e.mixed->masters_to_copies();
}

std::vector<std::pair<std::string, Tensor>> Engine::parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const optim::Param& p : impl_->params) out.emplace_back(p.name, p.value);
  return out;
}

}  // namespace merak::runtime
