//===- SafetensorsTest.cpp - safetensors reader/writer tests ----*- C++ -*-===//
#include "runtime/core/safetensors.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <unistd.h>

using namespace loom;

namespace {

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "loom_st_" + std::to_string(::getpid()) + "_" +
         name;
}

std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// A header + buffer image with the given JSON header text.
std::vector<uint8_t> image(const std::string &header, size_t bufferBytes) {
  std::vector<uint8_t> out(8 + header.size() + bufferBytes, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  return out;
}

SafetensorsFile sampleFile() {
  SafetensorsFile f;
  std::vector<float> wte = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f};
  f.addF32("wte", {2, 3}, wte.data());
  float scalar = -1.25f;
  f.addF32("h.0.ln_1.bias", {}, &scalar);
  SafeTensor ids;
  ids.name = "ids";
  ids.dtype = DType::I64;
  ids.shape = {4};
  int64_t v[4] = {1, -2, 3, -4};
  ids.data.resize(32);
  std::memcpy(ids.data.data(), v, 32);
  f.tensors.push_back(ids);
  SafeTensor half;
  half.name = "bf";
  half.dtype = DType::BF16;
  half.shape = {2};
  uint16_t h[2] = {floatToBF16(1.5f), floatToBF16(-2.0f)};
  half.data.resize(4);
  std::memcpy(half.data.data(), h, 4);
  f.tensors.push_back(half);
  f.metadata["format"] = "pt";
  f.metadata["step"] = "12";
  return f;
}

TEST(Safetensors, RoundTrip) {
  const std::string path = tempPath("roundtrip.safetensors");
  SafetensorsFile f = sampleFile();
  Status s = writeSafetensors(path, f);
  ASSERT_TRUE(s.ok()) << s.toString();
  SafetensorsFile back;
  s = readSafetensors(path, back);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_EQ(back.tensors.size(), 4u);
  EXPECT_EQ(back.metadata, f.metadata);
  for (const auto &t : f.tensors) {
    const SafeTensor *b = back.find(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    EXPECT_EQ(b->dtype, t.dtype);
    EXPECT_EQ(b->shape, t.shape);
    EXPECT_EQ(b->data, t.data);
  }
  std::vector<float> bf;
  ASSERT_TRUE(toFloat32(*back.find("bf"), bf).ok());
  EXPECT_EQ(bf, (std::vector<float>{1.5f, -2.0f}));
  std::vector<int64_t> ids;
  ASSERT_TRUE(toInt64(*back.find("ids"), ids).ok());
  EXPECT_EQ(ids, (std::vector<int64_t>{1, -2, 3, -4}));
  std::vector<float> wte;
  ASSERT_TRUE(toFloat32(*back.find("wte"), wte).ok());
  EXPECT_EQ(wte[5], 5.0f);
  EXPECT_FALSE(toFloat32(*back.find("ids"), wte).ok());
  // No temporary file is left behind.
  EXPECT_FALSE(std::ifstream(path + ".tmp." + std::to_string(::getpid())));
  std::remove(path.c_str());
}

TEST(Safetensors, LayoutIsSortedContiguousAndAligned) {
  const std::string path = tempPath("layout.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sampleFile()).ok());
  std::vector<uint8_t> bytes = readBytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | bytes[i];
  EXPECT_EQ((8 + n) % 8, 0u) << "data buffer must start 8-byte aligned";
  JsonValue header;
  ASSERT_TRUE(
      parseJson(std::string(bytes.begin() + 8, bytes.begin() + 8 + n), header)
          .ok());
  std::string prevName;
  int64_t prevEnd = 0;
  for (const auto &kv : header.members()) {
    if (kv.first == "__metadata__")
      continue;
    EXPECT_LT(prevName, kv.first);
    prevName = kv.first;
    const auto &offs = kv.second.find("data_offsets")->items();
    EXPECT_EQ(offs[0].asInt(), prevEnd) << kv.first;
    prevEnd = offs[1].asInt();
  }
  EXPECT_EQ(static_cast<uint64_t>(prevEnd), bytes.size() - 8 - n);
  std::remove(path.c_str());
}

/// Parses an image and returns the error message ("" when it parsed).
std::string parseError(const std::vector<uint8_t> &bytes) {
  SafetensorsFile f;
  Status s = parseSafetensors(bytes, "test.safetensors", f);
  return s.ok() ? "" : s.message();
}

TEST(Safetensors, CorruptHeadersGiveClearErrors) {
  const std::string ok =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(parseError(image(ok, 8)), "");

  struct Case {
    std::string header;
    size_t buffer;
    std::string expect;
  } cases[] = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8,
       "malformed header"},
      {R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8,
       "unknown dtype \"Q7\""},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
       "beyond the data buffer"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12,
       "needs 12"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
       "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8,
       "reversed"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", 8, "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296]},)"
       R"("data_offsets":[0,8]})",
       8, "a"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
       R"("data_offsets":[0,8]}})",
       8, "overflows"},
      {R"({"__metadata__":{"k":1}})", 0, "not a string"},
      {R"([1,2])", 0, "not a JSON object"},
  };
  for (const auto &c : cases) {
    std::string e = parseError(image(c.header, c.buffer));
    EXPECT_NE(e, "") << c.header;
    EXPECT_NE(e.find(c.expect), std::string::npos)
        << "header " << c.header << "\n  error: " << e;
    EXPECT_NE(e.find("test.safetensors"), std::string::npos) << e;
  }

  // Header length pointing past the end of the file.
  std::vector<uint8_t> bad = image(ok, 8);
  bad[0] = 0xff;
  bad[1] = 0x0f;
  EXPECT_NE(parseError(bad).find("beyond the end of the file"),
            std::string::npos);
  bad[5] = 0x01; // ~1 TB header
  EXPECT_NE(parseError(bad).find("100 MB"), std::string::npos);
  EXPECT_NE(parseError({1, 2, 3}).find("too short"), std::string::npos);
}

TEST(Safetensors, EveryTruncationIsAnErrorAndNoCorruptionCrashes) {
  const std::string path = tempPath("trunc.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sampleFile()).ok());
  const std::vector<uint8_t> bytes = readBytes(path);
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    EXPECT_NE(parseError(prefix), "") << "prefix of " << len << " bytes";
  }
  // Random byte flips must give either a valid file or an error; never a
  // crash (run under ASan/UBSan to make this bite harder).
  std::mt19937 gen(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> mutated = bytes;
    for (int k = 0; k < 3; ++k)
      mutated[gen() % mutated.size()] = static_cast<uint8_t>(gen());
    SafetensorsFile f;
    (void)parseSafetensors(mutated, "fuzz", f).ok();
  }
  SafetensorsFile f;
  Status s = readSafetensors(tempPath("does-not-exist.safetensors"), f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot open"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  SafetensorsFile f;
  SafeTensor t;
  t.name = "w";
  t.shape = {3};
  t.data.resize(8); // needs 12
  f.tensors.push_back(t);
  Status s = writeSafetensors(tempPath("never.safetensors"), f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("needs 12"), std::string::npos) << s.toString();
  f.tensors[0].data.resize(12);
  f.tensors.push_back(f.tensors[0]);
  s = writeSafetensors(tempPath("never.safetensors"), f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("appears twice"), std::string::npos);
  s = writeSafetensors("/nonexistent-dir/x.safetensors", sampleFile());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create"), std::string::npos);
}

TEST(Safetensors, Bf16Conversions) {
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f)), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.00390625f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.01171875f)), 1.015625f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(NAN))));
  EXPECT_EQ(f16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(f16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(f16ToFloat(0x0001), 5.960464477539063e-08f); // smallest subnormal
}

/// Cross-checks with PyTorch: Python parses our file (json + struct +
/// torch.frombuffer, as the safetensors package would) and writes one in the
/// Python library's layout for us to read.
TEST(Safetensors, PyTorchInterop) {
  const std::string python = LOOM_TEST_PYTHON3;
  if (::access(python.c_str(), X_OK) != 0)
    GTEST_SKIP() << python << " not found";
  if (std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "torch is not importable with " << python;

  const std::string ours = tempPath("ours.safetensors");
  const std::string theirs = tempPath("theirs.safetensors");
  const std::string script = tempPath("check.py");
  ASSERT_TRUE(writeSafetensors(ours, sampleFile()).ok());
  std::ofstream(script) << R"PY(
import json, struct, sys, torch
DT = {"F32": torch.float32, "I64": torch.int64, "BF16": torch.bfloat16}
def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    buf = bytearray(raw[8 + n:])
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        t = torch.frombuffer(buf[b:end], dtype=DT[e["dtype"]]) if end > b else torch.empty(0, dtype=DT[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out, meta
t, meta = load(sys.argv[1])
assert meta == {"format": "pt", "step": "12"}, meta
assert torch.equal(t["wte"], torch.arange(6, dtype=torch.float32).reshape(2, 3))
assert t["h.0.ln_1.bias"].shape == () and t["h.0.ln_1.bias"].item() == -1.25
assert t["ids"].tolist() == [1, -2, 3, -4]
assert t["bf"].float().tolist() == [1.5, -2.0]
# Write a file the way the safetensors package does (sorted, padded header).
tensors = {"lm.w": torch.linspace(-1, 1, 12).reshape(3, 4), "b": torch.tensor([7, 8], dtype=torch.int64)}
header, off, blobs = {"__metadata__": {"from": "torch"}}, 0, []
for name in sorted(tensors):
    data = tensors[name].contiguous().numpy().tobytes()
    header[name] = {"dtype": {torch.float32: "F32", torch.int64: "I64"}[tensors[name].dtype],
                    "shape": list(tensors[name].shape), "data_offsets": [off, off + len(data)]}
    off += len(data); blobs.append(data)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("python-ok")
)PY";
  std::string cmd = python + " " + script + " " + ours + " " + theirs;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  SafetensorsFile f;
  Status s = readSafetensors(theirs, f);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(f.metadata.at("from"), "torch");
  std::vector<float> w;
  ASSERT_TRUE(toFloat32(*f.find("lm.w"), w).ok());
  ASSERT_EQ(w.size(), 12u);
  EXPECT_EQ(f.find("lm.w")->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_FLOAT_EQ(w[0], -1.0f);
  EXPECT_FLOAT_EQ(w[11], 1.0f);
  std::vector<int64_t> b;
  ASSERT_TRUE(toInt64(*f.find("b"), b).ok());
  EXPECT_EQ(b, (std::vector<int64_t>{7, 8}));
  for (const auto &p : {ours, theirs, script})
    std::remove(p.c_str());
}

} // namespace

//===----------------------------------------------------------------------===//
// Tensor by tensor: SafetensorsWriter and SafetensorsReader
//===----------------------------------------------------------------------===//

namespace {

TensorEntry declared(const std::string &name, DType dtype,
                     std::vector<int64_t> shape) {
  TensorEntry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = std::move(shape);
  return e;
}

/// What writeSafetensors(sampleFile()) declares, in another order.
std::vector<TensorEntry> sampleEntries() {
  std::vector<TensorEntry> out;
  for (const SafeTensor &t : sampleFile().tensors)
    out.push_back(declared(t.name, t.dtype, t.shape));
  std::reverse(out.begin(), out.end());
  return out;
}

bool exists(const std::string &path) {
  return ::access(path.c_str(), F_OK) == 0;
}

TEST(SafetensorsStreaming, WriterInAnyOrderEqualsWriteSafetensors) {
  const std::string whole = tempPath("whole.safetensors");
  const std::string streamed = tempPath("streamed.safetensors");
  const SafetensorsFile f = sampleFile();
  ASSERT_TRUE(writeSafetensors(whole, f).ok());
  SafetensorsWriter w;
  Status s = w.create(streamed, sampleEntries(), f.metadata);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(w.path(), streamed);
  // Nothing under the real name until commit().
  EXPECT_FALSE(exists(streamed));
  for (size_t i : {2u, 0u, 3u, 1u}) {
    s = w.write(f.tensors[i].name, f.tensors[i].data.data());
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  std::vector<uint8_t> back(f.tensors[0].data.size());
  ASSERT_TRUE(w.readBack(f.tensors[0].name, back.data()).ok());
  EXPECT_EQ(back, f.tensors[0].data);
  s = w.commit();
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(readBytes(streamed), readBytes(whole));
  EXPECT_FALSE(exists(streamed + ".tmp." + std::to_string(::getpid())));
  std::remove(whole.c_str());
  std::remove(streamed.c_str());
}

TEST(SafetensorsStreaming, WriterErrorsNameTheTensorAndLeaveNoFile) {
  const std::string path = tempPath("unfinished.safetensors");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const SafetensorsFile f = sampleFile();
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.create(path, sampleEntries(), {}).ok());
    EXPECT_TRUE(exists(tmp));
    Status s = w.write("no-such-tensor", f.tensors[0].data.data());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("'no-such-tensor' was not declared"),
              std::string::npos)
        << s.toString();
    ASSERT_TRUE(w.write("wte", f.find("wte")->data.data()).ok());
    s = w.write("wte", f.find("wte")->data.data());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("'wte' is written twice"), std::string::npos);
    s = w.readBack("ids", nullptr);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("it was not written"), std::string::npos);
    s = w.create(path, sampleEntries(), {});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("still writing"), std::string::npos);
    // Three of four tensors never written: commit refuses, names one.
    s = w.commit();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("was declared but never written"),
              std::string::npos)
        << s.toString();
    EXPECT_FALSE(exists(path));
  }
  // A writer given up (an error mid-save) removes its temp file.
  EXPECT_FALSE(exists(tmp));
  EXPECT_FALSE(exists(path));

  SafetensorsWriter w;
  Status s = w.create(path, {declared("__metadata__", DType::F32, {1})}, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("__metadata__"), std::string::npos);
  s = w.create(path, {declared("w", DType::F32, {2, -1})}, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("negative dimension"), std::string::npos);
  s = w.commit();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no file"), std::string::npos);
  EXPECT_FALSE(exists(tmp));
}

TEST(SafetensorsStreaming, ReaderReadsRangesAndRefusesOutsideOrTruncated) {
  const std::string path = tempPath("ranges.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sampleFile()).ok());
  SafetensorsReader r;
  Status s = r.open(path);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(r.metadata().at("step"), "12");
  ASSERT_EQ(r.entries().size(), 4u);
  EXPECT_EQ(r.find("no-such-tensor"), nullptr);
  const TensorEntry *wte = r.find("wte");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->bytes(), 24u);
  float two[2] = {};
  ASSERT_TRUE(r.read(*wte, 12, 8, two).ok());
  EXPECT_EQ(two[0], 3.0f);
  EXPECT_EQ(two[1], 4.0f);
  s = r.read(*wte, 20, 8, two);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bytes [20, 28) lie outside its 24 bytes"),
            std::string::npos)
      << s.toString();
  // The file cut short after open(): the read says so.
  const std::vector<uint8_t> bytes = readBytes(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(bytes.size() - 30)), 0);
  const TensorEntry *last = nullptr;
  for (const TensorEntry &e : r.entries())
    if (!last || e.end > last->end)
      last = &e;
  std::vector<uint8_t> sink(last->bytes());
  s = r.read(*last, 0, last->bytes(), sink.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the file ends early"), std::string::npos)
      << s.toString();
  // A reader that opened nothing reads nothing.
  SafetensorsReader unopened;
  s = unopened.read(*wte, 0, 4, two);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no file is open"), std::string::npos);
  // Opened again, the truncation is found in the header's offsets.
  SafetensorsReader again;
  EXPECT_FALSE(again.open(path).ok());
  s = again.open(tempPath("does-not-exist.safetensors"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot open"), std::string::npos);
  std::remove(path.c_str());
}

/// A [5, 7, 6] tensor of `dtype` holding i * 0.5 at flat index i (exact in
/// every floating dtype), read as boxes of a [6, 7, 6] view (one padding
/// row) at chunk sizes from 1 element up: every element equals the value at
/// its global index, or zero past the stored ones.
void checkBoxes(DType dtype) {
  const std::vector<int64_t> stored = {5, 7, 6}, global = {6, 7, 6};
  const int64_t n = 5 * 7 * 6;
  SafetensorsFile f;
  SafeTensor t;
  t.name = "w";
  t.dtype = dtype;
  t.shape = stored;
  t.data.resize(static_cast<size_t>(n * dtypeSize(dtype)));
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.5f * static_cast<float>(i);
    if (dtype == DType::F64) {
      const double d = v;
      std::memcpy(t.data.data() + 8 * i, &d, 8);
    } else if (dtype == DType::BF16) {
      const uint16_t h = floatToBF16(v);
      std::memcpy(t.data.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(t.data.data() + 4 * i, &v, 4);
    }
  }
  f.tensors.push_back(t);
  const std::string path = tempPath("boxes.safetensors");
  ASSERT_TRUE(writeSafetensors(path, f).ok());
  SafetensorsReader r;
  ASSERT_TRUE(r.open(path).ok());
  // Leading-dim shards (ZeRO), an inner-dim shard (a tensor-parallel
  // column), a box of the padding row alone, the whole view, and a box with
  // an empty extent.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      boxes = {{{0, 0, 0}, {3, 7, 6}}, {{3, 0, 0}, {3, 7, 6}},
               {{0, 0, 2}, {6, 7, 3}}, {{1, 2, 1}, {4, 3, 4}},
               {{5, 0, 0}, {1, 7, 6}}, {{0, 0, 0}, {6, 7, 6}},
               {{2, 0, 0}, {0, 7, 6}}};
  for (const auto &[offset, extent] : boxes)
    for (int64_t chunk :
         {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{6}, int64_t{7},
          int64_t{41}, int64_t{300}, SafetensorsReader::kReadChunkElements}) {
      const int64_t count = extent[0] * extent[1] * extent[2];
      std::vector<float> out(static_cast<size_t>(count), -1.0f);
      std::vector<uint8_t> raw; // fresh: its size shows the largest read
      Status s = r.readFloat32Box(r.entries()[0], global, offset, extent,
                                  out.data(), raw, chunk);
      ASSERT_TRUE(s.ok()) << s.toString();
      for (int64_t a = 0; a < extent[0]; ++a)
        for (int64_t b = 0; b < extent[1]; ++b)
          for (int64_t c = 0; c < extent[2]; ++c) {
            const int64_t g =
                ((offset[0] + a) * 7 + offset[1] + b) * 6 + offset[2] + c;
            const float want = g < n ? 0.5f * static_cast<float>(g) : 0.0f;
            ASSERT_EQ(
                out[static_cast<size_t>((a * extent[1] + b) * extent[2] + c)],
                want)
                << dtypeName(dtype) << " chunk " << chunk << " box at ["
                << offset[0] << "," << offset[1] << "," << offset[2]
                << "] element " << a << "," << b << "," << c;
          }
      EXPECT_LE(raw.size(), static_cast<size_t>(chunk * dtypeSize(dtype)));
    }
  std::remove(path.c_str());
}

TEST(SafetensorsStreaming, Float32BoxesAtEveryChunkSize) {
  for (DType dtype : {DType::F32, DType::F64, DType::BF16})
    checkBoxes(dtype);
  // A box of an integer tensor is an error naming it.
  const std::string path = tempPath("ints.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sampleFile()).ok());
  SafetensorsReader r;
  ASSERT_TRUE(r.open(path).ok());
  std::vector<float> out(4);
  std::vector<uint8_t> raw;
  Status s = r.readFloat32Box(*r.find("ids"), {4}, {0}, {4}, out.data(), raw);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'ids' has dtype I64"), std::string::npos)
      << s.toString();
  std::remove(path.c_str());
}

} // namespace
