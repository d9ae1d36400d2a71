//===- BpeTokenizerTest.cpp - GPT-2 BPE, UTF-8, Unicode ---------*- C++ -*-===//
//
// The expected pieces and replacements are what Python's `regex` module (with
// tiktoken's gpt2 pattern) and bytes.decode("utf-8", errors="replace") give;
// test/e2e/sample-bpe.test compares the same code with them on many more
// strings through loom-run.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/bpe_tokenizer.h"
#include "runtime/core/unicode_categories.h"
#include "runtime/core/utf8.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace loom;

namespace {

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "loom_bpe_" + std::to_string(::getpid()) + "_" +
         name;
}

/// An llm.c tokenizer file: `header` ints (padded to 256), then `tokens` as
/// length + bytes, then `trailing`.
void writeTable(const std::string &path, std::vector<int32_t> header,
                const std::vector<std::string> &tokens,
                const std::string &trailing = "") {
  header.resize(256, 0);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(header.data()), 256 * 4);
  for (const std::string &t : tokens) {
    f.put(static_cast<char>(t.size()));
    f.write(t.data(), static_cast<std::streamsize>(t.size()));
  }
  f << trailing;
}

/// The 256 single bytes, then `merged`, then "<|endoftext|>".
std::vector<std::string> byteTable(const std::vector<std::string> &merged) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.insert(tokens.end(), merged.begin(), merged.end());
  tokens.push_back("<|endoftext|>");
  return tokens;
}

Status loadTable(const std::vector<std::string> &tokens, BpeTokenizer &tok,
                 int32_t version = 2) {
  const std::string path = tempPath("table.bin");
  writeTable(path,
             {20240328, version, static_cast<int32_t>(tokens.size()),
              static_cast<int32_t>(tokens.size()) - 1},
             tokens);
  return BpeTokenizer::load(path, tok);
}

std::vector<std::string> pieces(const std::string &utf8) {
  std::u32string cps;
  EXPECT_TRUE(decodeUtf8(utf8, cps).ok()) << utf8;
  return splitGpt2Pieces(cps);
}

} // namespace

TEST(Utf8Test, DecodesAndEncodesEveryLength) {
  for (char32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu,
                      0x10000u, 0x1F600u, 0x10FFFFu}) {
    std::string bytes;
    appendUtf8(cp, bytes);
    std::u32string back;
    ASSERT_TRUE(decodeUtf8(bytes, back).ok()) << std::hex << cp;
    EXPECT_EQ(back, std::u32string(1, cp));
  }
  std::u32string cps;
  ASSERT_TRUE(decodeUtf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80", cps).ok());
  EXPECT_EQ(cps, (std::u32string{U'a', 0xE9, 0x4E2D, 0x1F600}));
}

TEST(Utf8Test, IllFormedInputNamesTheByte) {
  std::u32string cps;
  struct Case {
    std::string text, words;
  } cases[] = {
      {"ok\xC0\xAF", "byte 2 (0xC0) does not start a well-formed"}, // overlong
      {"\xED\xA0\x80", "byte 0 (0xED)"},                            // surrogate
      {"ab\x80", "byte 2 (0x80)"}, // lone continuation byte
      {"ok\xE2\x82", "byte 2 (0xE2) does not start a well-formed UTF-8 "
                     "character (the text ends inside it)"},
      {"\xF4\x90\x80\x80", "byte 0 (0xF4)"}, // above U+10FFFF
  };
  for (const Case &c : cases) {
    Status s = decodeUtf8(c.text, cps);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.words), std::string::npos) << s.message();
  }
}

TEST(Utf8Test, ReplacesMaximalSubpartsAsPython) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(replaceIllFormedUtf8("plain \xC3\xA9"), "plain \xC3\xA9");
  EXPECT_EQ(replaceIllFormedUtf8("\xE0\x80"), fffd + fffd);
  EXPECT_EQ(replaceIllFormedUtf8("ok\xE2\x82"), "ok" + fffd);
  EXPECT_EQ(replaceIllFormedUtf8("\xF0\x9F\x98"
                                 "A"),
            fffd + "A");
  EXPECT_EQ(replaceIllFormedUtf8("\xFF"), fffd);
  EXPECT_EQ(replaceIllFormedUtf8("\xED\xA0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(replaceIllFormedUtf8("\xC0\xAF"), fffd + fffd);
  EXPECT_EQ(replaceIllFormedUtf8("\xF4\x90\x80\x80"),
            fffd + fffd + fffd + fffd);
}

TEST(UnicodeCategoriesTest, LettersNumbersAndWhiteSpace) {
  for (char32_t c : {U'a', U'Z', char32_t(0xE9), char32_t(0x436),
                     char32_t(0x4E2D), char32_t(0x3042), char32_t(0xDF)})
    EXPECT_TRUE(isUnicodeLetter(c)) << std::hex << c;
  for (char32_t c : {U'0', U'9', char32_t(0x663), char32_t(0xBD),
                     char32_t(0x2167), char32_t(0xB2)})
    EXPECT_TRUE(isUnicodeNumber(c)) << std::hex << c;
  // Marks, symbols and punctuation are neither.
  for (char32_t c : {char32_t(0x301), char32_t(0x670), U'!', U'\'',
                     char32_t(0x1F600), U'_'}) {
    EXPECT_FALSE(isUnicodeLetter(c)) << std::hex << c;
    EXPECT_FALSE(isUnicodeNumber(c)) << std::hex << c;
  }
  for (char32_t c :
       {U' ', U'\t', U'\n', U'\r', char32_t(0xB), char32_t(0xC), char32_t(0x85),
        char32_t(0xA0), char32_t(0x1680), char32_t(0x2000), char32_t(0x200A),
        char32_t(0x2028), char32_t(0x2029), char32_t(0x202F), char32_t(0x205F),
        char32_t(0x3000)})
    EXPECT_TRUE(isUnicodeWhiteSpace(c)) << std::hex << c;
  // Python's str.isspace counts U+001C..U+001F; White_Space does not.
  for (char32_t c : {char32_t(0x1C), char32_t(0x1F), char32_t(0x200B),
                     char32_t(0x180E), U'a'})
    EXPECT_FALSE(isUnicodeWhiteSpace(c)) << std::hex << c;
  EXPECT_STREQ(unicodeTablesVersion(), "14.0.0");
}

TEST(BpeTokenizerTest, SplitsAsGpt2Pattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("x\n\ny"), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces("it's rock'n'roll"),
            (V{"it", "'s", " rock", "'", "n", "'", "roll"}));
  EXPECT_EQ(pieces("  "), (V{"  "}));
  EXPECT_EQ(pieces("end  "), (V{"end", "  "}));
  EXPECT_EQ(pieces("3.14 \xC2\xBD\xD9\xB0"),
            (V{"3", ".", "14", " \xC2\xBD", "\xD9\xB0"}));
  EXPECT_EQ(pieces("e\xCC\x81!?"), (V{"e", "\xCC\x81!?"}));
  EXPECT_EQ(pieces(" \xC2\xA0x"), (V{" ", "\xC2\xA0", "x"}));
  EXPECT_EQ(pieces(""), V{});
}

TEST(BpeTokenizerTest, MergesLowestRankFirstAsTiktoken) {
  BpeTokenizer tok;
  // 256 "bc" ranks before 257 "ab": "abc" is a + bc; "aaa" merges leftmost.
  ASSERT_TRUE(
      loadTable(byteTable({"bc", "ab", "aa", " ab", "abab"}), tok).ok());
  EXPECT_EQ(tok.vocabSize(), 262);
  EXPECT_EQ(tok.endOfText(), 261);
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok.encode("abc", ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 256}));
  ASSERT_TRUE(tok.encode("aaa", ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{258, 'a'}));
  // A piece that is a token is that token; " ab" is one piece.
  ASSERT_TRUE(tok.encode("abab ab", ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{260, 259}));
  // Text never encodes to end-of-text.
  ASSERT_TRUE(tok.encode("<|endoftext|>", ids).ok());
  for (int32_t id : ids)
    EXPECT_LT(id, 256);
  std::string bytes;
  ASSERT_TRUE(tok.decode({261, 'a', 256, 259}, bytes).ok());
  EXPECT_EQ(bytes, "<|endoftext|>abc ab");
  Status s = tok.decode({'a', 262}, bytes);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token 1 is 262, outside"), std::string::npos)
      << s.message();
  s = tok.encode("ok\xFF", ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("byte 2 (0xFF)"), std::string::npos)
      << s.message();
}

TEST(BpeTokenizerTest, TextWithAByteNoTokenSpellsIsAnError) {
  std::vector<std::string> tokens;
  for (char c : std::string("abc "))
    tokens.push_back(std::string(1, c));
  tokens.push_back("<|endoftext|>");
  BpeTokenizer tok;
  ASSERT_TRUE(loadTable(tokens, tok).ok());
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok.encode("cab a", ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 0, 1, 3, 0}));
  Status s = tok.encode("cabz", ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no token for byte 0x7A"), std::string::npos)
      << s.message();
}

TEST(BpeTokenizerTest, VersionOneIsGpt2sEndOfText) {
  std::vector<std::string> tokens = byteTable({});
  tokens.pop_back();
  for (int i = 0; tokens.size() < 50256; ++i)
    tokens.push_back("t" + std::to_string(i));
  tokens.push_back("<|endoftext|>");
  BpeTokenizer tok;
  ASSERT_TRUE(loadTable(tokens, tok, /*version=*/1).ok());
  EXPECT_EQ(tok.vocabSize(), 50257);
  EXPECT_EQ(tok.endOfText(), 50256);
  // Any other version-1 size names no end-of-text token.
  ASSERT_TRUE(loadTable(byteTable({"ab"}), tok, 1).ok());
  EXPECT_EQ(tok.endOfText(), -1);
}

TEST(BpeTokenizerTest, CorruptFilesAreErrors) {
  const std::vector<std::string> good = byteTable({"ab"});
  const int32_t n = static_cast<int32_t>(good.size());
  const std::string path = tempPath("corrupt.bin");
  BpeTokenizer tok;
  auto expectError = [&](const std::string &words) {
    Status s = BpeTokenizer::load(path, tok);
    ASSERT_FALSE(s.ok()) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  Status s = BpeTokenizer::load(tempPath("missing.bin"), tok);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot open tokenizer file"), std::string::npos);
  { std::ofstream(path, std::ios::binary) << "short"; }
  expectError("shorter than its 1024-byte header");
  writeTable(path, {20240520, 1, 10}, {});
  expectError("a token file's magic is 20240520: pass it as --data");
  writeTable(path, {20240328, 3, n, n - 1}, good);
  expectError("has version 3");
  writeTable(path, {20240328, 2, 0, 0}, {});
  expectError("says it holds 0 tokens");
  writeTable(path, {20240328, 2, n, n}, good);
  expectError("names token 258 as end-of-text (header[3]), outside its 258");
  writeTable(path, {20240328, 2, n + 1, n}, good);
  expectError("ends after 258 of its 259 tokens");
  std::vector<std::string> empty = good;
  empty[256] = "";
  writeTable(path, {20240328, 2, n, n - 1}, empty);
  expectError("token 256 (at byte 1536) has length 0");
  writeTable(path, {20240328, 2, n, n - 1}, good, "xyz");
  expectError("has 3 bytes after its 258 tokens");
  std::vector<std::string> dup = good;
  dup[256] = "a";
  writeTable(path, {20240328, 2, n, n - 1}, dup);
  expectError("tokens 97 and 256 have the same bytes");
  // The last token's length promises a byte more than the file holds.
  writeTable(path, {20240328, 2, n, n - 1}, good);
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  data.pop_back();
  { std::ofstream(path, std::ios::binary) << data; }
  expectError("token 257 (at byte 1539) needs 13 bytes but the file ends "
              "after 12 (truncated?)");
}
