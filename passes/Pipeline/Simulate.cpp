//===- Simulate.cpp - Run a pipeline schedule on paper ----------*- C++ -*-===//
//
// Two passes over the action lists. The first matches messages in program
// order (it decides deadlock freedom and which send feeds which receive);
// the second times the actions from those dependencies.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Simulate.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

using namespace mlir;
using namespace mlir::loom;

double Timeline::bubbleFraction() const {
  double idle = 0;
  for (const StageTimeline &s : stages)
    idle += s.idleSeconds;
  return makespan > 0 && !stages.empty() ? idle / (makespan * stages.size())
                                         : 0.0;
}

double Timeline::bubbleOverhead() const {
  double idle = 0, busy = 0;
  for (const StageTimeline &s : stages) {
    idle += s.idleSeconds;
    busy += s.busySeconds;
  }
  return busy > 0 ? idle / busy : 0.0;
}

namespace {

/// A message in flight: who sent it, for which action.
struct Message {
  int64_t stage = 0, action = 0;
  bool backward = false;
  int64_t microbatch = 0, bytes = 0;
};

/// "B3 (backward of micro-batch 3)" or, with chunks, "F3.1 (forward of
/// micro-batch 3, chunk 5)".
std::string describe(const PipelineAction &a, int64_t stage,
                     const PipelineModel &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << a.str(m.virtualStages > 1) << " ("
     << (a.backward ? "backward" : "forward") << " of micro-batch "
     << a.microbatch;
  if (m.virtualStages > 1)
    os << ", chunk " << a.chunk * m.stages + stage;
  os << ")";
  return s;
}

} // namespace

bool mlir::loom::simulatePipeline(const PipelineModel &model,
                                  Timeline &timeline, std::string &error) {
  const int64_t p = model.stages;
  llvm::raw_string_ostream err(error);
  if (static_cast<int64_t>(model.actions.size()) != p ||
      static_cast<int64_t>(model.chunks.size()) != p * model.virtualStages) {
    err << "the model has " << model.actions.size() << " action lists and "
        << model.chunks.size() << " chunks for " << p << " stages x "
        << model.virtualStages << " virtual";
    return false;
  }
  auto chunkOf = [&](int64_t stage, const PipelineAction &a) -> const
      ChunkModel & { return model.chunks[a.chunk * p + stage]; };

  // 1. Match messages in program order.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Message>> channels;
  std::vector<size_t> pc(p, 0), ev(p, 0);
  // deps[s][i]: the (stage, action, bytes) whose messages action i receives.
  std::vector<std::vector<llvm::SmallVector<std::tuple<int64_t, int64_t, int64_t>>>>
      deps(p);
  for (int64_t s = 0; s < p; ++s) {
    deps[s].resize(model.actions[s].size());
    for (const PipelineAction &a : model.actions[s])
      if (a.chunk < 0 || a.chunk >= model.virtualStages) {
        err << "stage " << s << " runs " << a.str(true)
            << ", but stages hold " << model.virtualStages << " chunks";
        return false;
      }
  }
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const auto &list = model.actions[s];
      while (pc[s] < list.size()) {
        const PipelineAction &a = list[pc[s]];
        const ChunkModel &chunk = chunkOf(s, a);
        const auto &events = a.backward ? chunk.backwardComm : chunk.forwardComm;
        bool blocked = false;
        while (ev[s] < events.size()) {
          const CommEvent &e = events[ev[s]];
          if (e.peer < 0 || e.peer >= p) {
            err << "stage " << s << " in " << describe(a, s, model)
                << " talks to stage " << e.peer << ", outside 0.." << p - 1;
            return false;
          }
          if (e.send) {
            channels[{s, e.peer, e.tag}].push_back(
                {s, static_cast<int64_t>(pc[s]), a.backward, a.microbatch,
                 e.bytes});
          } else {
            auto &queue = channels[{e.peer, s, e.tag}];
            if (queue.empty()) {
              blocked = true;
              break;
            }
            Message msg = queue.front();
            queue.pop_front();
            if (msg.backward != a.backward || msg.microbatch != a.microbatch) {
              err << "stage " << s << " in " << describe(a, s, model)
                  << " receives tag " << e.tag << " from stage " << e.peer
                  << " but gets the "
                  << (msg.backward ? "backward" : "forward")
                  << " of micro-batch " << msg.microbatch
                  << ": the two stages run their micro-batches in different "
                     "orders";
              return false;
            }
            if (msg.bytes != e.bytes) {
              err << "stage " << s << " in " << describe(a, s, model)
                  << " receives " << e.bytes << " bytes with tag " << e.tag
                  << " but stage " << e.peer << " sends " << msg.bytes;
              return false;
            }
            deps[s][pc[s]].push_back({msg.stage, msg.action, msg.bytes});
          }
          ++ev[s];
          progress = true;
        }
        if (blocked)
          break;
        ++pc[s];
        ev[s] = 0;
        progress = true;
      }
    }
  }
  bool finished = true;
  for (int64_t s = 0; s < p; ++s)
    finished &= pc[s] == model.actions[s].size();
  if (!finished) {
    err << "the schedule deadlocks:";
    bool first = true;
    for (int64_t s = 0; s < p; ++s) {
      if (pc[s] == model.actions[s].size())
        continue;
      const PipelineAction &a = model.actions[s][pc[s]];
      const ChunkModel &chunk = chunkOf(s, a);
      const CommEvent &e =
          (a.backward ? chunk.backwardComm : chunk.forwardComm)[ev[s]];
      err << (first ? " " : "; ") << "stage " << s << " waits in "
          << describe(a, s, model) << " for tag " << e.tag << " from stage "
          << e.peer;
      first = false;
    }
    return false;
  }
  for (const auto &[key, queue] : channels)
    if (!queue.empty()) {
      const Message &msg = queue.front();
      err << "stage " << std::get<0>(key) << " sends tag " << std::get<2>(key)
          << " to stage " << std::get<1>(key) << " in "
          << describe(model.actions[msg.stage][msg.action], msg.stage, model)
          << " but no action of stage " << std::get<1>(key) << " receives it";
      return false;
    }

  // 2. Time the actions: each starts when its stage is free and the
  //    messages it receives have arrived.
  timeline = Timeline();
  timeline.stages.resize(p);
  std::vector<std::vector<double>> ends(p);
  std::vector<size_t> next(p, 0);
  std::vector<double> freeAt(p, 0.0);
  size_t remaining = 0;
  for (int64_t s = 0; s < p; ++s) {
    ends[s].resize(model.actions[s].size());
    remaining += model.actions[s].size();
  }
  while (remaining > 0) {
    bool advanced = false;
    for (int64_t s = 0; s < p; ++s) {
      while (next[s] < model.actions[s].size()) {
        size_t i = next[s];
        double start = freeAt[s];
        bool ready = true;
        for (auto [q, j, bytes] : deps[s][i]) {
          if (static_cast<size_t>(j) >= next[q]) {
            ready = false;
            break;
          }
          double latency = model.linkBytesPerSecond > 0
                               ? double(bytes) / model.linkBytesPerSecond
                               : 0.0;
          start = std::max(start, ends[q][j] + latency);
        }
        if (!ready)
          break;
        const PipelineAction &a = model.actions[s][i];
        const ChunkModel &chunk = chunkOf(s, a);
        double duration =
            a.backward ? chunk.backwardSeconds : chunk.forwardSeconds;
        ends[s][i] = start + duration;
        freeAt[s] = ends[s][i];
        timeline.stages[s].actions.push_back({a, start, ends[s][i]});
        timeline.stages[s].busySeconds += duration;
        timeline.makespan = std::max(timeline.makespan, ends[s][i]);
        ++next[s];
        --remaining;
        advanced = true;
      }
    }
    if (!advanced) {
      err << "the schedule's actions wait on each other within one action "
             "(a receive after a send that the peer needs first)";
      return false;
    }
  }

  // 3. Idle time and activations in flight.
  for (int64_t s = 0; s < p; ++s) {
    StageTimeline &st = timeline.stages[s];
    st.idleSeconds = timeline.makespan - st.busySeconds;
    int64_t inFlight = 0, bytes = 0;
    for (const PipelineAction &a : model.actions[s]) {
      if (model.forwardOnly)
        break;
      int64_t stash = chunkOf(s, a).stashBytes;
      inFlight += a.backward ? -1 : 1;
      bytes += a.backward ? -stash : stash;
      st.peakInFlight = std::max(st.peakInFlight, inFlight);
      st.peakStashBytes = std::max(st.peakStashBytes, bytes);
    }
  }
  return true;
}
