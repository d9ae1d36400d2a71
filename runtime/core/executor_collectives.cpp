//===- executor_collectives.cpp - The collectives of Executor ---*- C++ -*-===//
//
// AllReduce (one value in place, or a packed bucket; now, or started and
// left in flight until an instruction touches its bytes), ZeRO-1's in-place
// last-micro-batch ReduceScatter (one value, or a bucket), ZeRO-2/3's
// ReduceScatter buckets and the AllGather buckets (packed, unpacked on
// completion; a bucket's members each split on their own dimension),
// completing the in-flight collectives, and the other collectives of the
// instruction stream: AllGather and
// ReduceScatter (possibly in flight), AllToAll, Send and Recv, with
// non-leading dimensions packed / unpacked around the Communicator call.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include <cstddef>
#include <utility>

namespace loom {

using program::DType;
using program::Opcode;

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {

/// Moves one bucket member's blocks between the member and the bucket's
/// chunks (rank r's chunk `chunkBytes` apart from `chunks`), into the
/// chunks (a ReduceScatter's pack) or out of them (an AllGather's unpack).
/// The member, of `wholeShape` split at `dim` into n blocks, is [outer, n,
/// run bytes]; chunk r holds its block r as [outer, run] from byte `at`.
/// One 2-D copy per outer row or per rank, whichever is fewer: one in all
/// for a leading dimension.
Status moveMemberBlocks(KernelBackend &kernels, bool intoChunks, void *chunks,
                        int64_t chunkBytes, int64_t at, void *member,
                        const std::vector<int64_t> &wholeShape, int64_t dim,
                        int64_t n, int64_t elemBytes) {
  const int64_t outer = program::shapeNumelBefore(wholeShape, dim);
  const int64_t run = program::shapeNumel(wholeShape) / (outer * n) * elemBytes;
  uint8_t *chunk = static_cast<uint8_t *>(chunks) + at;
  uint8_t *whole = static_cast<uint8_t *>(member);
  auto copy = [&](uint8_t *inChunks, int64_t chunkPitch, uint8_t *inMember,
                  int64_t memberPitch, int64_t rows) {
    return intoChunks ? kernels.copy2D(inChunks, chunkPitch, inMember,
                                       memberPitch, run, rows)
                      : kernels.copy2D(inMember, memberPitch, inChunks,
                                       chunkPitch, run, rows);
  };
  if (outer <= n) {
    // Outer row o: its n blocks, one per chunk.
    for (int64_t o = 0; o < outer; ++o)
      LOOM_RETURN_IF_ERROR(
          copy(chunk + o * run, chunkBytes, whole + o * n * run, run, n));
  } else {
    // Chunk r: block r of every outer row.
    for (int64_t r = 0; r < n; ++r)
      LOOM_RETURN_IF_ERROR(
          copy(chunk + r * chunkBytes, run, whole + r * run, n * run, outer));
  }
  return Status::success();
}

} // namespace

std::vector<uint32_t> Executor::axesOf(const program::Instruction &ins) {
  if (!ins.axes())
    return {};
  return {ins.axes()->begin(), ins.axes()->end()};
}

Status Executor::unpackConsecutive(const void *from,
                                   const std::vector<uint32_t> &out,
                                   int64_t elemBytes) {
  const uint8_t *at = static_cast<const uint8_t *>(from);
  for (uint32_t b : out) {
    const int64_t bytes = bufferNumel(b) * elemBytes;
    LOOM_RETURN_IF_ERROR(kernels->copy(bufferData(b), at, bytes));
    at += bytes;
  }
  return Status::success();
}

Status Executor::runAllReduce(const program::Instruction &ins,
                              const std::vector<uint32_t> &in,
                              const std::vector<uint32_t> &out,
                              const std::vector<uint32_t> &scr) {
  const std::vector<uint32_t> axes = axesOf(ins);
  const DType dt = bufferDType(in[0]);
  const int64_t eb = program::dtypeBytes(dt);
  // One value reduces in place in its output; a bucket is packed into its
  // scratch buffer, reduced there and unpacked into the outputs.
  const bool bucket = in.size() > 1;
  void *buf = bucket ? bufferData(scr[0]) : bufferData(out[0]);
  int64_t count = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const int64_t n = bufferNumel(in[k]);
    uint8_t *at = static_cast<uint8_t *>(buf) + count * eb;
    if (at != bufferData(in[k]))
      LOOM_RETURN_IF_ERROR(kernels->copy(at, bufferData(in[k]), n * eb));
    count += n;
  }
  auto unpack = [this, buf, eb, out]() -> Status {
    return unpackConsecutive(buf, out, eb);
  };
  if (ins.members() && ins.members()->size() > 0) {
    // Among some coordinates of one axis (a pipeline's shared parameter).
    std::vector<int64_t> members(ins.members()->begin(), ins.members()->end());
    return comm->allReduceAmong(buf, count, dt, ins.reduction(), axes[0],
                                members);
  }
  if (!ins.async_collective()) {
    LOOM_RETURN_IF_ERROR(
        comm->allReduce(buf, count, dt, ins.reduction(), axes));
    return bucket ? unpack() : Status::success();
  }
  InFlight flight;
  LOOM_RETURN_IF_ERROR(comm->startAllReduce(buf, count, dt, ins.reduction(),
                                            axes, flight.ticket));
  for (uint32_t b : out)
    flight.busy.push_back(byteRange(b));
  if (bucket) {
    flight.busy.push_back(byteRange(scr[0]));
    flight.finish = unpack;
  }
  inFlight.push_back(std::move(flight));
  return Status::success();
}

Status Executor::runReduceScatterInPlace(const program::Instruction &ins,
                                         const std::vector<uint32_t> &in,
                                         const std::vector<uint32_t> &scr) {
  const std::vector<uint32_t> axes = axesOf(ins);
  const DType dt = bufferDType(in[0]);
  const int64_t eb = program::dtypeBytes(dt), n = comm->groupSize(axes);
  const int64_t count = bufferNumel(in[0]) / n;
  const std::vector<int64_t> &shape = shapes[in[0]];
  const int64_t dim = ins.dim(), extent = shape[dim] / n;
  void *data = bufferData(in[0]);
  void *block = bufferData(scr[0]);
  const void *src = data;
  if (program::shapeNumelBefore(shape, dim) != 1) {
    void *packed = bufferData(scr[1]);
    LOOM_RETURN_IF_ERROR(kernels->packBlocks(packed, src, shape, dim, n, eb));
    src = packed;
  }
  // The block goes back over the input (the rank's block of `dim`, as
  // LocalSlice reads it; zeros in the others) once the reduction is done.
  const int64_t offset = comm->groupRank(axes) * extent;
  auto writeBack = [this, data, block, shape, dim, offset, extent,
                    eb]() -> Status {
    return kernels->sliceDimGrad(data, block, shape, dim, offset, extent, eb);
  };
  if (!ins.async_collective()) {
    LOOM_RETURN_IF_ERROR(
        comm->reduceScatter(src, block, count, dt, ins.reduction(), axes));
    return writeBack();
  }
  InFlight flight;
  flight.busy = {byteRange(in[0])};
  for (uint32_t b : scr)
    flight.busy.push_back(byteRange(b));
  flight.finish = writeBack;
  LOOM_RETURN_IF_ERROR(comm->startReduceScatter(
      src, block, count, dt, ins.reduction(), axes, flight.ticket));
  inFlight.push_back(std::move(flight));
  return Status::success();
}

Executor::InFlight
Executor::bucketInFlight(const std::vector<uint32_t> &out,
                         const std::vector<uint32_t> &scr,
                         std::function<Status()> unpack) const {
  // The inputs were packed at the start; the outputs are written, and the
  // scratch read and written, until the collective completes.
  InFlight flight;
  for (const std::vector<uint32_t> *list : {&out, &scr})
    for (uint32_t b : *list)
      flight.busy.push_back(byteRange(b));
  flight.finish = std::move(unpack);
  return flight;
}

Status Executor::runReduceScatterBucket(const program::Instruction &ins,
                                        const std::vector<uint32_t> &in,
                                        const std::vector<uint32_t> &out,
                                        const std::vector<uint32_t> &scr) {
  const std::vector<uint32_t> axes = axesOf(ins);
  const DType dt = bufferDType(in[0]);
  const int64_t eb = program::dtypeBytes(dt), n = comm->groupSize(axes);
  // 1. Chunk r of the packed buffer holds every member's block r (what
  //    rank r receives), member after member, each split on its own
  //    dimension.
  int64_t total = 0;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < in.size(); ++i) {
    total += bufferNumel(in[i]);
    dims.push_back(program::memberDim(ins, i));
  }
  void *received = bufferData(scr[0]), *packed = bufferData(scr[1]);
  int64_t at = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    LOOM_RETURN_IF_ERROR(moveMemberBlocks(*kernels, /*intoChunks=*/true, packed,
                                          total / n * eb, at, bufferData(in[i]),
                                          shapes[in[i]], dims[i], n, eb));
    at += bufferNumel(in[i]) / n * eb;
  }
  // 2. This rank's chunk holds its block of each member, in order: copied
  //    into the results, or (in place, ZeRO-1's accumulators in the last
  //    micro-batch) written back over each input as its block of the
  //    member's dimension (group-rank order, as LocalSlice reads it), zeros
  //    in the others.
  std::function<Status()> unpack = [this, received, eb, out]() -> Status {
    return unpackConsecutive(received, out, eb);
  };
  if (ins.last_microbatch_only()) {
    std::vector<std::vector<int64_t>> wholeShapes;
    for (uint32_t b : in)
      wholeShapes.push_back(shapes[b]);
    const int64_t g = comm->groupRank(axes);
    unpack = [this, received, eb, n, g, in, wholeShapes, dims]() -> Status {
      const uint8_t *block = static_cast<const uint8_t *>(received);
      for (size_t i = 0; i < in.size(); ++i) {
        const int64_t extent = wholeShapes[i][dims[i]] / n;
        LOOM_RETURN_IF_ERROR(kernels->sliceDimGrad(bufferData(in[i]), block,
                                                   wholeShapes[i], dims[i],
                                                   g * extent, extent, eb));
        block += program::shapeNumel(wholeShapes[i]) / n * eb;
      }
      return Status::success();
    };
  }
  if (!ins.async_collective()) {
    LOOM_RETURN_IF_ERROR(comm->reduceScatter(packed, received, total / n, dt,
                                             ins.reduction(), axes));
    return unpack();
  }
  InFlight flight = bucketInFlight(out, scr, unpack);
  LOOM_RETURN_IF_ERROR(comm->startReduceScatter(
      packed, received, total / n, dt, ins.reduction(), axes, flight.ticket));
  inFlight.push_back(std::move(flight));
  return Status::success();
}

Status Executor::runAllGatherBucket(const program::Instruction &ins,
                                    const std::vector<uint32_t> &in,
                                    const std::vector<uint32_t> &out,
                                    const std::vector<uint32_t> &scr) {
  const std::vector<uint32_t> axes = axesOf(ins);
  const DType dt = bufferDType(in[0]);
  const int64_t eb = program::dtypeBytes(dt), n = comm->groupSize(axes);
  // 1. This rank's shards side by side: what it contributes.
  std::vector<const void *> shards;
  std::vector<int64_t> counts;
  int64_t count = 0;
  for (uint32_t b : in) {
    shards.push_back(bufferData(b));
    counts.push_back(bufferNumel(b));
    count += bufferNumel(b);
  }
  void *packed = bufferData(scr[0]), *gathered = bufferData(scr[1]);
  LOOM_RETURN_IF_ERROR(
      kernels->concatDim(packed, shards, counts, {count}, 0, eb));
  // 2. Chunk r of the gathered buffer is rank r's contribution; result i
  //    is its member's shard of every rank, concatenated along the
  //    member's dimension.
  std::vector<std::vector<int64_t>> wholeShapes;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < in.size(); ++i) {
    wholeShapes.push_back(shapes[out[i]]);
    dims.push_back(program::memberDim(ins, i));
  }
  auto unpack = [this, gathered, count, counts, wholeShapes, dims, eb, n,
                 out]() -> Status {
    int64_t at = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      LOOM_RETURN_IF_ERROR(moveMemberBlocks(
          *kernels, /*intoChunks=*/false, gathered, count * eb, at,
          bufferData(out[i]), wholeShapes[i], dims[i], n, eb));
      at += counts[i] * eb;
    }
    return Status::success();
  };
  if (!ins.async_collective()) {
    LOOM_RETURN_IF_ERROR(comm->allGather(packed, gathered, count, dt, axes));
    return unpack();
  }
  InFlight flight = bucketInFlight(out, scr, unpack);
  LOOM_RETURN_IF_ERROR(
      comm->startAllGather(packed, gathered, count, dt, axes, flight.ticket));
  inFlight.push_back(std::move(flight));
  return Status::success();
}

program::BufferRange Executor::byteRange(uint32_t b) const {
  return program::bufferRange(*stageTable, b);
}

Status Executor::completeInFlight(const program::Instruction *ins) {
  if (inFlight.empty())
    return Status::success();
  std::vector<program::BufferRange> touched;
  if (ins)
    for (const auto *list : {ins->inputs(), ins->outputs(), ins->scratch()})
      if (list)
        for (uint32_t b : *list)
          touched.push_back(byteRange(b));
  auto overlaps = [&](const InFlight &f) {
    for (const program::BufferRange &busy : f.busy)
      for (const program::BufferRange &used : touched)
        if (busy.overlaps(used))
          return true;
    return false;
  };
  for (size_t i = 0; i < inFlight.size();) {
    if (ins && !overlaps(inFlight[i])) {
      ++i;
      continue;
    }
    InFlight f = std::move(inFlight[i]);
    inFlight.erase(inFlight.begin() + static_cast<std::ptrdiff_t>(i));
    LOOM_RETURN_IF_ERROR(comm->complete(f.ticket));
    if (f.finish)
      LOOM_RETURN_IF_ERROR(f.finish());
  }
  return Status::success();
}

Status Executor::runCollective(const program::Instruction &ins,
                               const std::vector<uint32_t> &in,
                               const std::vector<uint32_t> &out,
                               const std::vector<uint32_t> &scr, void *dst) {
  const std::vector<uint32_t> axes = axesOf(ins);
  const Opcode op = ins.opcode();
  const int64_t n = comm->groupSize(axes);
  // A split of a non-leading dimension moves its blocks rank by rank
  // through scratch the compiler planned (getScratchTypes), `scr[k]`; a
  // program without it (built by hand) gets a workspace temporary.
  auto blockBuffer = [&](size_t k, TempPool &pool, int64_t bytes) {
    return k < scr.size() ? bufferData(scr[k])
                          : static_cast<void *>(temp(pool, (bytes + 3) / 4));
  };
  switch (op) {
  case Opcode::AllGather: {
    const DType dt = bufferDType(in[0]);
    const int64_t eb = program::dtypeBytes(dt), count = bufferNumel(in[0]);
    const auto &shape = shapes[in[0]];
    const int64_t dim = ins.dim();
    if (ins.async_collective()) {
      // Prefetch: in flight until an instruction touches input or output.
      InFlight flight;
      flight.busy = {byteRange(in[0]), byteRange(out[0])};
      void *into = dst;
      if (program::shapeNumelBefore(shape, dim) != 1) {
        // Received into its scratch (else a spare temporary of buffer
        // memory: several gathers may be in flight), unpacked into the
        // output on completion.
        const uint64_t bytes = static_cast<uint64_t>(count * n * eb);
        uint8_t *received = nullptr;
        if (!scr.empty()) {
          received = static_cast<uint8_t *>(bufferData(scr[0]));
          flight.busy.push_back(byteRange(scr[0]));
        } else {
          LOOM_RETURN_IF_ERROR(takeSpare(bytes, received));
        }
        into = received;
        const bool spare = scr.empty();
        flight.finish = [this, dst, received, bytes, shape, dim, n, eb,
                         spare]() -> Status {
          Status s = kernels->unpackBlocks(dst, received, shape, dim, n, eb);
          if (spare)
            returnSpare(bytes, received);
          return s;
        };
      }
      LOOM_RETURN_IF_ERROR(comm->startAllGather(bufferData(in[0]), into, count,
                                                dt, axes, flight.ticket));
      inFlight.push_back(std::move(flight));
      return Status::success();
    }
    if (program::shapeNumelBefore(shape, dim) == 1)
      return comm->allGather(bufferData(in[0]), dst, count, dt, axes);
    void *gathered = blockBuffer(0, workspace, count * n * eb);
    LOOM_RETURN_IF_ERROR(
        comm->allGather(bufferData(in[0]), gathered, count, dt, axes));
    return kernels->unpackBlocks(dst, gathered, shape, dim, n, eb);
  }
  case Opcode::ReduceScatter: {
    const DType dt = bufferDType(in[0]);
    const int64_t eb = program::dtypeBytes(dt), count = bufferNumel(out[0]);
    const auto &shape = shapes[in[0]];
    const int64_t dim = ins.dim();
    const void *src = bufferData(in[0]);
    if (ins.async_collective()) {
      // Behind the next instructions: in flight until one touches its
      // input, output or packed copy (the planner keeps them until the
      // result's first reader). A non-leading dim is packed into its
      // planned scratch (the verifier asks for one).
      InFlight flight;
      flight.busy = {byteRange(in[0]), byteRange(out[0])};
      if (program::shapeNumelBefore(shape, dim) != 1) {
        void *packed = bufferData(scr[0]);
        LOOM_RETURN_IF_ERROR(
            kernels->packBlocks(packed, src, shape, dim, n, eb));
        src = packed;
        flight.busy.push_back(byteRange(scr[0]));
      }
      LOOM_RETURN_IF_ERROR(comm->startReduceScatter(
          src, dst, count, dt, ins.reduction(), axes, flight.ticket));
      inFlight.push_back(std::move(flight));
      return Status::success();
    }
    if (program::shapeNumelBefore(shape, dim) != 1) {
      void *packed = blockBuffer(0, workspace, count * n * eb);
      LOOM_RETURN_IF_ERROR(kernels->packBlocks(packed, src, shape, dim, n, eb));
      src = packed;
    }
    return comm->reduceScatter(src, dst, count, dt, ins.reduction(), axes);
  }
  case Opcode::AllToAll: {
    const DType dt = bufferDType(in[0]);
    const int64_t eb = program::dtypeBytes(dt);
    const auto &shape = shapes[in[0]];
    const int64_t dim = ins.dim(), dim2 = ins.dim2();
    const int64_t chunk = bufferNumel(in[0]) / n;
    std::vector<int64_t> chunkShape = shape;
    chunkShape[dim] /= n;
    const void *src = bufferData(in[0]);
    size_t next = 0; // the next planned scratch: packed, then received
    if (program::shapeNumelBefore(shape, dim) != 1) {
      void *packed = blockBuffer(next++, workspace, chunk * n * eb);
      LOOM_RETURN_IF_ERROR(kernels->packBlocks(packed, src, shape, dim, n, eb));
      src = packed;
    }
    if (program::shapeNumelBefore(chunkShape, dim2) == 1)
      return comm->allToAll(src, dst, chunk, dt, axes);
    void *received = blockBuffer(next, workspace2, chunk * n * eb);
    LOOM_RETURN_IF_ERROR(comm->allToAll(src, received, chunk, dt, axes));
    return kernels->unpackBlocks(dst, received, chunkShape, dim2, n, eb);
  }
  case Opcode::Send:
  case Opcode::Recv: {
    std::vector<int64_t> c = comm->coords();
    c[axes[0]] = ins.peer();
    const int peer = comm->rankOf(c);
    if (op == Opcode::Send)
      return comm->send(bufferData(in[0]), bufferNumel(in[0]),
                        bufferDType(in[0]), peer, ins.tag());
    const int64_t waitStart = steadyNowNs();
    Status received = comm->recv(dst, bufferNumel(out[0]), bufferDType(out[0]),
                                 peer, ins.tag());
    recvWaitNs += steadyNowNs() - waitStart;
    return received;
  }
  default:
    break;
  }
  LOOM_ERROR("not a collective: " << program::opcodeName(op));
}

} // namespace loom
