//===- instruction_checker.cpp - Checks one instruction ---------*- C++ -*-===//
//
// InstructionChecker's operand checks (counts, dtypes, shapes, overlaps),
// its dispatch by opcode family, and the data movement, collective and cast
// opcodes. The compute, gradient / optimizer and vocab-parallel loss
// opcodes are in instruction_checker_compute.cpp.
//
//===----------------------------------------------------------------------===//
#include "runtime/program/verifier_internal.h"

namespace loom::program::detail {

Status InstructionChecker::counts(size_t minIn, size_t maxIn, size_t nOut,
                                  size_t maxScratch, size_t maxOut) {
  const std::string op = opcodeName(ins.opcode());
  INSTR_CHECK(inputs.size() >= minIn && inputs.size() <= maxIn,
              op << " takes " << minIn
                 << (maxIn == minIn      ? ""
                     : maxIn == SIZE_MAX ? " or more"
                                         : " to " + std::to_string(maxIn))
                 << " inputs, got " << inputs.size());
  if (maxOut <= nOut)
    INSTR_CHECK(outputs.size() == nOut,
                op << " has " << nOut << " output(s), got " << outputs.size());
  else
    INSTR_CHECK(outputs.size() >= nOut && outputs.size() <= maxOut,
                op << " has " << nOut << " to " << maxOut << " outputs, got "
                   << outputs.size());
  INSTR_CHECK(scratch.size() <= maxScratch,
              op << " takes at most " << maxScratch << " scratch buffers, got "
                 << scratch.size());
  const size_t n = facts.shapes.size();
  auto inRange = [&](const std::vector<uint32_t> &v,
                     const char *what) -> Status {
    for (size_t k = 0; k < v.size(); ++k)
      INSTR_CHECK(v[k] < n, what << " #" << k << " is buffer " << v[k]
                                 << ", but the stage has " << n << " buffers");
    return Status::success();
  };
  LOOM_RETURN_IF_ERROR(inRange(inputs, "input"));
  LOOM_RETURN_IF_ERROR(inRange(outputs, "output"));
  LOOM_RETURN_IF_ERROR(inRange(scratch, "scratch"));
  // Scratch is the kernel's own memory: it may not share bytes with an
  // operand (the kernel would overwrite its own input).
  auto overlap = [&](uint32_t a, uint32_t b) {
    return facts.offsets[a] < facts.offsets[b] + facts.bytes[b] &&
           facts.offsets[b] < facts.offsets[a] + facts.bytes[a];
  };
  for (size_t k = 0; k < scratch.size(); ++k) {
    for (uint32_t other : inputs)
      INSTR_CHECK(!overlap(scratch[k], other),
                  "scratch #" << k << " (buffer " << scratch[k]
                              << ") overlaps input buffer " << other);
    for (uint32_t other : outputs)
      INSTR_CHECK(!overlap(scratch[k], other),
                  "scratch #" << k << " (buffer " << scratch[k]
                              << ") overlaps output buffer " << other);
    for (size_t m = k + 1; m < scratch.size(); ++m)
      INSTR_CHECK(!overlap(scratch[k], scratch[m]),
                  "scratch #" << k << " overlaps scratch #" << m);
  }
  // Several outputs are written independently: they may not share bytes.
  for (size_t k = 0; k < outputs.size(); ++k)
    for (size_t m = k + 1; m < outputs.size(); ++m)
      INSTR_CHECK(!overlap(outputs[k], outputs[m]),
                  "output #" << k << " (buffer " << outputs[k]
                             << ") overlaps output #" << m << " (buffer "
                             << outputs[m] << ")");
  return Status::success();
}

Status InstructionChecker::dtype(uint32_t b, DType want, const char *role) {
  INSTR_CHECK(facts.dtypes[b] == want, role << " (buffer " << b << ") must be "
                                            << dtypeLabel(want) << ", got "
                                            << dtypeLabel(facts.dtypes[b]));
  return Status::success();
}

Status InstructionChecker::floating(uint32_t b, const char *role) {
  INSTR_CHECK(facts.dtypes[b] == DType::F32 || facts.dtypes[b] == DType::BF16,
              role << " (buffer " << b << ") must be F32 or BF16, got "
                   << dtypeLabel(facts.dtypes[b]));
  return Status::success();
}

Status InstructionChecker::sameShape(uint32_t b,
                                     const std::vector<int64_t> &want,
                                     const char *role) {
  INSTR_CHECK(shape(b) == want, role << " (buffer " << b << ") has shape "
                                     << shapeString(shape(b)) << ", expected "
                                     << shapeString(want));
  return Status::success();
}

Status InstructionChecker::numel(uint32_t b, int64_t want, const char *role) {
  INSTR_CHECK(shapeNumel(shape(b)) == want,
              role << " (buffer " << b << ") of shape " << shapeString(shape(b))
                   << " has " << shapeNumel(shape(b)) << " elements, expected "
                   << want);
  return Status::success();
}

Status InstructionChecker::scalar(uint32_t b, const char *role) {
  LOOM_RETURN_IF_ERROR(dtype(b, DType::F32, role));
  return numel(b, 1, role);
}

Status InstructionChecker::check() {
  const Opcode op = ins.opcode();
  INSTR_CHECK(!ins.async_collective() || op == Opcode::AllReduce ||
                  op == Opcode::AllGather || op == Opcode::ReduceScatter,
              "only AllReduce, AllGather and ReduceScatter may be "
              "asynchronous, not "
                  << opcodeName(op));
  INSTR_CHECK(!ins.last_microbatch_only() || op == Opcode::AllReduce ||
                  op == Opcode::ReduceScatter,
              "only AllReduce and ReduceScatter may run in the last "
              "micro-batch only, not "
                  << opcodeName(op));
  const auto *memberDims = ins.member_dims();
  const size_t inputCount = ins.inputs() ? ins.inputs()->size() : 0;
  INSTR_CHECK(!memberDims || memberDims->size() == 0 ||
                  ((op == Opcode::AllGather || op == Opcode::ReduceScatter) &&
                   inputCount > 1 && memberDims->size() == inputCount),
              "member_dims (" << (memberDims ? memberDims->size() : 0)
                              << " dimensions) belong to an AllGather or "
                                 "ReduceScatter bucket, one per input; this "
                              << opcodeName(op) << " has " << inputCount
                              << " inputs; recompile the program");
  if (op >= Opcode::Copy && op <= Opcode::Concat)
    return checkMovement();
  if (op <= Opcode::CrossEntropy)
    return checkCompute();
  if (op >= Opcode::EmbeddingGrad && op <= Opcode::ClipCoef)
    return checkTraining();
  if (op >= Opcode::RowMax && op <= Opcode::CrossEntropySumsGrad)
    return checkVocabParallelLoss();
  // LocalSlice is no collective (it communicates nothing) but shares the
  // mesh / axes checks.
  if (isCollective(op) || op == Opcode::LocalSlice)
    return checkCollective();
  if (op == Opcode::Cast)
    return checkCast();
  if (op == Opcode::Wait)
    return checkWait();
  const char *schemaName = EnumNameOpcode(op);
  INSTR_CHECK(!(schemaName && *schemaName),
              "program uses " << schemaName
                              << ", which this runtime cannot run yet (it "
                                 "executes compute, data movement, gradient, "
                                 "optimizer, collective, cast and wait "
                                 "opcodes 0-40)");
  INSTR_CHECK(false, "unknown opcode " << static_cast<unsigned>(op)
                                       << " (not in this runtime's schema); "
                                          "update the runtime or recompile");
  return Status::success();
}

Status InstructionChecker::checkMovement() {
  const Opcode op = ins.opcode();
  LOOM_RETURN_IF_ERROR(counts(1, op == Opcode::Concat ? SIZE_MAX : 1, 1, 0));
  // Data movement works on any dtype, but does not convert.
  const uint32_t out = outputs[0];
  for (uint32_t b : inputs)
    INSTR_CHECK(facts.dtypes[b] == facts.dtypes[out],
                "input buffer " << b << " is " << dtypeLabel(facts.dtypes[b])
                                << " but the result is "
                                << dtypeLabel(facts.dtypes[out])
                                << " (no conversion)");
  const auto &in = shape(inputs[0]), &o = shape(out);
  switch (op) {
  case Opcode::Copy:
    return numel(out, shapeNumel(in), "result");
  case Opcode::Transpose: {
    std::vector<int64_t> perm = toVector(ins.permutation());
    INSTR_CHECK(perm.size() == in.size(),
                "permutation has " << perm.size()
                                   << " entries but the input has rank "
                                   << in.size());
    std::vector<bool> used(in.size(), false);
    std::vector<int64_t> want;
    for (int64_t p : perm) {
      INSTR_CHECK(p >= 0 && p < static_cast<int64_t>(in.size()) && !used[p],
                  "permutation " << shapeString(perm)
                                 << " is not a permutation of 0.."
                                 << static_cast<int64_t>(in.size()) - 1);
      used[p] = true;
      want.push_back(in[p]);
    }
    return sameShape(out, want, "result");
  }
  case Opcode::Slice: {
    const int64_t dim = ins.dim(), offset = ins.offset();
    INSTR_CHECK(in.size() == o.size(),
                "result rank " << o.size() << " differs from input rank "
                               << in.size());
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(in.size()),
                "dim " << dim << " is out of range for rank " << in.size());
    INSTR_CHECK(offset >= 0 && offset <= in[dim] - o[dim],
                "slice of " << o[dim] << " at offset " << offset
                            << " of dimension " << dim
                            << " is out of bounds for size " << in[dim]);
    for (size_t d = 0; d < in.size(); ++d)
      INSTR_CHECK(static_cast<int64_t>(d) == dim || in[d] == o[d],
                  "result dimension "
                      << d << " is " << o[d] << " but only dimension " << dim
                      << " may change (input " << shapeString(in) << ")");
    return Status::success();
  }
  case Opcode::Concat: {
    const int64_t dim = ins.dim();
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(o.size()),
                "dim " << dim << " is out of range for rank " << o.size());
    int64_t total = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto &s = shape(inputs[k]);
      INSTR_CHECK(s.size() == o.size(), "input #" << k << " has rank "
                                                  << s.size()
                                                  << " but the result has "
                                                     "rank "
                                                  << o.size());
      for (size_t d = 0; d < s.size(); ++d)
        INSTR_CHECK(static_cast<int64_t>(d) == dim || s[d] == o[d],
                    "input #" << k << " " << shapeString(s)
                              << " differs from the result " << shapeString(o)
                              << " in dimension " << d);
      total += s[dim]; // each <= arena size: no overflow
    }
    INSTR_CHECK(total == o[dim], "inputs add up to "
                                     << total << " along dim " << dim
                                     << " but the result has " << o[dim]);
    return Status::success();
  }
  default:
    break;
  }
  return Status::success();
}

Status InstructionChecker::checkCollective() {
  const Opcode op = ins.opcode();
  INSTR_CHECK(
      !facts.mesh.empty(),
      (op == Opcode::LocalSlice ? "LocalSlice needs" : "collectives need")
          << " a device mesh, but Program.mesh is empty "
             "(a single-rank program)");
  const std::vector<uint32_t> axes = toVector(ins.axes());
  INSTR_CHECK(!axes.empty(), opcodeName(op) << " names no mesh axes");
  int64_t n = 1;
  for (size_t k = 0; k < axes.size(); ++k) {
    INSTR_CHECK(axes[k] < facts.mesh.size(),
                "axis " << axes[k] << " is out of range (the mesh has "
                        << facts.mesh.size() << " axes)");
    for (size_t m = 0; m < k; ++m)
      INSTR_CHECK(axes[m] != axes[k], "axis " << axes[k] << " appears twice");
    n *= facts.mesh[axes[k]];
  }
  const Reduction red = ins.reduction();
  auto checkReduction = [&](uint32_t b) -> Status {
    const char *rn = EnumNameReduction(red);
    INSTR_CHECK(rn && *rn, "unknown reduction " << static_cast<int>(red));
    INSTR_CHECK(red != Reduction::Avg || facts.dtypes[b] == DType::F32 ||
                    facts.dtypes[b] == DType::BF16,
                "Avg reduction needs F32 or BF16 data, got "
                    << dtypeLabel(facts.dtypes[b]));
    return Status::success();
  };
  auto checkDim = [&](int64_t dim, const std::vector<int64_t> &s,
                      const char *what) -> Status {
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(s.size()),
                what << " " << dim << " is out of range for rank " << s.size());
    return Status::success();
  };
  // In and out may be the same bytes (in place) or disjoint, never partly
  // overlapping.
  auto inPlaceOrDisjoint = [&](uint32_t a, uint32_t b) -> Status {
    INSTR_CHECK(!overlaps(a, b) || (facts.offsets[a] == facts.offsets[b] &&
                                    facts.bytes[a] == facts.bytes[b]),
                "input buffer " << a << " partly overlaps output buffer " << b);
    return Status::success();
  };
  // A last-micro-batch reduction runs in place (skipped in the other
  // micro-batches, its result must be where its input already is): the
  // output is the input's bytes. `what` names the instruction.
  auto inPlaceOutput = [&](uint32_t in, uint32_t out,
                           const char *what) -> Status {
    INSTR_CHECK(facts.offsets[in] == facts.offsets[out] &&
                    facts.bytes[in] == facts.bytes[out],
                "a last-micro-batch "
                    << what << " reduces in place, but output buffer " << out
                    << " is not input buffer " << in
                    << "'s bytes; recompile the program");
    return Status::success();
  };
  // A ReduceScatter or AllGather of several values (a bucket, members
  // sharing dtype, each split on its own dimension): one collective
  // through two scratch buffers. A ReduceScatter packs every member's
  // block r into chunk r of scratch[1] and receives this rank's chunk in
  // scratch[0]; an AllGather packs this rank's shards into scratch[0] and
  // gathers every rank's into scratch[1]. Each output is unpacked from
  // them; in the last micro-batch only (a ReduceScatter of ZeRO-1's
  // accumulators) each output is its input's bytes, written back in place.
  auto checkBucket = [&]() -> Status {
    const bool scatter = op == Opcode::ReduceScatter;
    const bool inPlace = ins.last_microbatch_only();
    const std::string name = opcodeName(op);
    const size_t k = inputs.size();
    LOOM_RETURN_IF_ERROR(counts(k, k, k, 2));
    INSTR_CHECK(scratch.size() == 2,
                "a " << name << " of " << k << " values needs 2 scratch buffers"
                     << (scatter ? " (its received blocks and packed inputs)"
                                 : " (its packed shards and gathered shards)")
                     << ", got " << scratch.size());
    uint64_t total = 0;
    for (size_t j = 0; j < k; ++j) {
      const uint32_t in = inputs[j], out = outputs[j];
      const int64_t dim = memberDim(ins, j);
      LOOM_RETURN_IF_ERROR(dtype(in, facts.dtypes[inputs[0]], "bucket input"));
      LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
      if (scatter)
        LOOM_RETURN_IF_ERROR(checkReduction(in));
      const std::vector<int64_t> &s = shape(in);
      LOOM_RETURN_IF_ERROR(checkDim(dim, s, "dim"));
      std::vector<int64_t> want = s;
      if (scatter) {
        INSTR_CHECK(s[dim] % n == 0, "input #" << j << "'s dimension " << dim
                                               << " of " << shapeString(s)
                                               << " is not divisible by the "
                                                  "group size "
                                               << n);
        if (!inPlace)
          want[dim] = s[dim] / n;
      } else {
        want[dim] = s[dim] * n;
      }
      LOOM_RETURN_IF_ERROR(sameShape(out, want, "result"));
      if (inPlace)
        LOOM_RETURN_IF_ERROR(inPlaceOutput(in, out, "ReduceScatter bucket"));
      for (uint32_t other : {in, scratch[0], scratch[1]})
        INSTR_CHECK((inPlace && other == in) || !overlaps(out, other),
                    "output buffer " << out << " of the " << name
                                     << " bucket overlaps buffer " << other);
      total += facts.bytes[in];
    }
    for (uint32_t b : scratch)
      LOOM_RETURN_IF_ERROR(dtype(b, facts.dtypes[inputs[0]], "scratch"));
    INSTR_CHECK(!overlaps(scratch[0], scratch[1]),
                "the " << name << " bucket's two scratch buffers overlap");
    const uint64_t groupSize = static_cast<uint64_t>(n);
    const uint64_t need[2] = {scatter ? total / groupSize : total,
                              scatter ? total : total * groupSize};
    const char *role[2] = {scatter ? "received-blocks" : "packed-shards",
                           scatter ? "packed-inputs" : "gathered-shards"};
    for (size_t m = 0; m < 2; ++m)
      INSTR_CHECK(facts.bytes[scratch[m]] >= need[m],
                  "the " << name << " bucket's " << role[m]
                         << " scratch buffer has " << facts.bytes[scratch[m]]
                         << " bytes, but needs " << need[m]);
    return Status::success();
  };
  switch (op) {
  case Opcode::AllReduce: {
    // One value, or a bucket: k inputs packed into scratch[0], k outputs.
    INSTR_CHECK(!inputs.empty() && inputs.size() == outputs.size(),
                "AllReduce needs one output per input, got "
                    << inputs.size() << " inputs and " << outputs.size()
                    << " outputs");
    const size_t k = inputs.size();
    LOOM_RETURN_IF_ERROR(counts(k, k, k, k > 1 ? 1 : 0));
    int64_t packed = 0;
    for (size_t j = 0; j < k; ++j) {
      const uint32_t in = inputs[j], out = outputs[j];
      LOOM_RETURN_IF_ERROR(dtype(in, facts.dtypes[inputs[0]], "bucket input"));
      LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
      LOOM_RETURN_IF_ERROR(sameShape(out, shape(in), "result"));
      LOOM_RETURN_IF_ERROR(checkReduction(in));
      LOOM_RETURN_IF_ERROR(inPlaceOrDisjoint(in, out));
      if (ins.last_microbatch_only())
        LOOM_RETURN_IF_ERROR(inPlaceOutput(in, out, "AllReduce"));
      packed += facts.bytes[in];
    }
    INSTR_CHECK(!ins.last_microbatch_only() || !ins.members() ||
                    ins.members()->size() == 0,
                "an AllReduce among pipeline members cannot run in the last "
                "micro-batch only");
    if (k > 1) {
      INSTR_CHECK(scratch.size() == 1,
                  "an AllReduce of " << k
                                     << " values needs one scratch buffer to "
                                        "pack them into, got "
                                     << scratch.size());
      INSTR_CHECK(static_cast<int64_t>(facts.bytes[scratch[0]]) >= packed,
                  "the AllReduce scratch buffer has "
                      << facts.bytes[scratch[0]] << " bytes, but its " << k
                      << " values need " << packed);
      for (size_t j = 0; j < k; ++j)
        INSTR_CHECK(!overlaps(scratch[0], outputs[j]) &&
                        !overlaps(scratch[0], inputs[j]),
                    "the AllReduce scratch buffer overlaps value #" << j);
    }
    if (ins.members() && ins.members()->size() > 0) {
      // Among some coordinates of one axis (a pipeline's shared parameter).
      const std::vector<int64_t> members = toVector(ins.members());
      INSTR_CHECK(axes.size() == 1 && k == 1 && !ins.async_collective(),
                  "an AllReduce among members reduces one value over one "
                  "axis, synchronously");
      INSTR_CHECK(facts.dtypes[inputs[0]] == DType::F32 ||
                      facts.dtypes[inputs[0]] == DType::BF16,
                  "an AllReduce among members needs F32 or BF16 data, got "
                      << dtypeLabel(facts.dtypes[inputs[0]]));
      INSTR_CHECK(members.size() >= 2, "an AllReduce among members needs at "
                                       "least two members");
      for (size_t m = 0; m < members.size(); ++m)
        INSTR_CHECK(members[m] >= 0 && members[m] < n &&
                        (m == 0 || members[m] > members[m - 1]),
                    "members must be increasing coordinates below the axis "
                    "size "
                        << n << ", got " << members[m]);
    }
    return Status::success();
  }
  case Opcode::ReduceScatter:
  case Opcode::AllGather:
    if (inputs.size() > 1)
      return checkBucket();
    [[fallthrough]];
  case Opcode::AllToAll: {
    // A last-micro-batch ReduceScatter reduces in place (skipped in the
    // other micro-batches, its result must be where its input already is):
    // the output is the input's bytes and shape, the received block in
    // scratch[0] until it completes.
    const bool inPlace = ins.last_microbatch_only();
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 2));
    const uint32_t in = inputs[0], out = outputs[0];
    LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
    if (inPlace)
      LOOM_RETURN_IF_ERROR(inPlaceOutput(in, out, "ReduceScatter"));
    else
      INSTR_CHECK(!overlaps(in, out),
                  "output buffer " << out << " overlaps input buffer " << in);
    const std::vector<int64_t> &s = shape(in);
    const int64_t dim = ins.dim();
    LOOM_RETURN_IF_ERROR(checkDim(dim, s, "dim"));
    std::vector<int64_t> want = s;
    if (op == Opcode::AllGather) {
      want[dim] = s[dim] * n;
    } else {
      INSTR_CHECK(s[dim] % n == 0, "input dimension " << dim << " of "
                                                      << shapeString(s)
                                                      << " is not divisible "
                                                         "by the group size "
                                                      << n);
      want[dim] = s[dim] / n;
      if (op == Opcode::ReduceScatter)
        LOOM_RETURN_IF_ERROR(checkReduction(in));
      if (op == Opcode::AllToAll) {
        const int64_t dim2 = ins.dim2();
        LOOM_RETURN_IF_ERROR(checkDim(dim2, s, "dim2"));
        want[dim2] *= n;
      }
      // In place, the result keeps the input's shape.
      if (inPlace)
        want = s;
    }
    // The scratch, role by role: a split of a non-leading dimension moves
    // its blocks rank by rank through a buffer of the value's gathered
    // (AllGather) or whole (ReduceScatter, AllToAll) size; an AllToAll
    // also receives through one when its concat dim is not leading in a
    // block. The compiler plans them all; a program without them (built
    // by hand) runs them in the runtime's workspace, except where the
    // collective outlives its instruction (in flight, in place).
    struct Role {
      const char *what;  // in "the X's <what> scratch buffer"
      const char *label; // in "needs N scratch buffers (its <label>)"
      uint64_t bytes;
    };
    std::vector<Role> roles;
    const bool blocks = shapeNumelBefore(s, dim) != 1;
    bool required = false;
    if (op == Opcode::ReduceScatter) {
      if (inPlace)
        roles.push_back(
            {"received-block", "received block", facts.bytes[in] / n});
      if (blocks)
        roles.push_back({"packed-input", "packed input", facts.bytes[in]});
      required = inPlace || ins.async_collective();
    } else if (op == Opcode::AllGather) {
      if (blocks)
        roles.push_back(
            {"gathered-blocks", "gathered blocks", facts.bytes[in] * n});
    } else {
      std::vector<int64_t> block = s;
      block[dim] /= n;
      if (blocks)
        roles.push_back({"packed-input", "packed input", facts.bytes[in]});
      if (shapeNumelBefore(block, ins.dim2()) != 1)
        roles.push_back(
            {"received-blocks", "received blocks", facts.bytes[in]});
    }
    std::string names;
    for (const Role &r : roles)
      names += std::string(names.empty() ? " (its " : " and ") + r.label;
    if (!names.empty())
      names += ")";
    INSTR_CHECK(
        scratch.size() == roles.size() || (scratch.empty() && !required),
        (inPlace                       ? "a last-micro-batch (in-place) "
         : ins.async_collective()      ? "an asynchronous "
         : op == Opcode::ReduceScatter ? "a "
                                       : "an ")
            << opcodeName(op) << " of dimension " << dim << " of "
            << shapeString(s) << " needs " << roles.size() << " scratch buffers"
            << names << (required || roles.empty() ? "" : " or none")
            << ", got " << scratch.size());
    for (size_t k = 0; k < scratch.size(); ++k) {
      LOOM_RETURN_IF_ERROR(dtype(scratch[k], facts.dtypes[in], "scratch"));
      INSTR_CHECK(facts.bytes[scratch[k]] >= roles[k].bytes,
                  "the " << opcodeName(op) << "'s " << roles[k].what
                         << " scratch buffer has " << facts.bytes[scratch[k]]
                         << " bytes, but needs " << roles[k].bytes);
    }
    return sameShape(out, want, "result");
  }
  case Opcode::LocalSlice: {
    // Any dtype (a copy of a block); out may share bytes with x (the
    // executor stages it).
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    const uint32_t in = inputs[0], out = outputs[0];
    LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
    const std::vector<int64_t> &s = shape(in);
    const int64_t dim = ins.dim();
    LOOM_RETURN_IF_ERROR(checkDim(dim, s, "dim"));
    INSTR_CHECK(s[dim] % n == 0, "input dimension " << dim << " of "
                                                    << shapeString(s)
                                                    << " is not divisible by "
                                                       "the group size "
                                                    << n);
    std::vector<int64_t> want = s;
    want[dim] = s[dim] / n;
    return sameShape(out, want, "result");
  }
  case Opcode::Send:
  case Opcode::Recv: {
    if (op == Opcode::Send)
      LOOM_RETURN_IF_ERROR(counts(1, 1, 0, 0));
    else
      LOOM_RETURN_IF_ERROR(counts(0, 0, 1, 0));
    INSTR_CHECK(axes.size() == 1, opcodeName(op)
                                      << " runs along exactly one mesh axis, "
                                         "got "
                                      << axes.size());
    INSTR_CHECK(ins.peer() >= 0 && ins.peer() < n,
                "peer " << ins.peer() << " is out of range for axis " << axes[0]
                        << " of size " << n);
    INSTR_CHECK(ins.tag() >= 0 && ins.tag() <= 32767,
                "tag " << ins.tag() << " must be in [0, 32767]");
    return Status::success();
  }
  default:
    break;
  }
  return Status::success();
}

Status InstructionChecker::checkWait() {
  // Only a point the in-flight collectives of its inputs complete at: it
  // writes nothing.
  LOOM_RETURN_IF_ERROR(counts(1, SIZE_MAX, 0, 0));
  return Status::success();
}

Status InstructionChecker::checkCast() {
  LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
  const uint32_t in = inputs[0], out = outputs[0];
  const DType from = facts.dtypes[in], to = facts.dtypes[out];
  INSTR_CHECK((from == DType::F32 && to == DType::BF16) ||
                  (from == DType::BF16 && to == DType::F32),
              "Cast converts F32 to BF16 or BF16 to F32, got "
                  << dtypeLabel(from) << " (buffer " << in << ") to "
                  << dtypeLabel(to) << " (buffer " << out << ")"
                  << (from == to ? "; a same-dtype move is a Copy" : ""));
  return sameShape(out, shape(in), "result");
}

} // namespace loom::program::detail
