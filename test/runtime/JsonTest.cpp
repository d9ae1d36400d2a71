//===- JsonTest.cpp - Minimal JSON parser / writer tests --------*- C++ -*-===//
#include "runtime/core/json.h"

#include <gtest/gtest.h>

using namespace loom;

namespace {

TEST(Json, ParsesNestedDocument) {
  JsonValue v;
  Status s = parseJson(
      R"( {"a": [1, -2, 3.5, 1e3, true, false, null], "b": {"c": "x\"\\\n\u00e9\ud83d\ude00"},
           "big": 9007199254740993} )",
      v);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(v.isObject());
  const JsonValue *a = v.find("a");
  ASSERT_TRUE(a && a->isArray());
  ASSERT_EQ(a->items().size(), 7u);
  EXPECT_TRUE(a->items()[0].isInteger());
  EXPECT_EQ(a->items()[1].asInt(), -2);
  EXPECT_FALSE(a->items()[2].isInteger());
  EXPECT_DOUBLE_EQ(a->items()[2].asDouble(), 3.5);
  EXPECT_DOUBLE_EQ(a->items()[3].asDouble(), 1000.0);
  EXPECT_TRUE(a->items()[4].asBool());
  EXPECT_TRUE(a->items()[6].isNull());
  EXPECT_EQ(v.find("b")->find("c")->asString(),
            "x\"\\\n\xc3\xa9\xf0\x9f\x98\x80");
  // Integers beyond 2^53 stay exact (data offsets of large checkpoints).
  EXPECT_EQ(v.find("big")->asInt(), 9007199254740993LL);
}

TEST(Json, WriteThenParseRoundTrips) {
  JsonValue obj = JsonValue::object();
  obj.set("s", JsonValue::string("tab\there \"q\" \x01"));
  JsonValue arr = JsonValue::array();
  arr.push(JsonValue::integer(-42));
  arr.push(JsonValue::number(0.1));
  obj.set("arr", std::move(arr));
  std::string text = writeJson(obj);
  JsonValue back;
  ASSERT_TRUE(parseJson(text, back).ok()) << text;
  EXPECT_EQ(back.find("s")->asString(), "tab\there \"q\" \x01");
  EXPECT_EQ(back.find("arr")->items()[0].asInt(), -42);
  EXPECT_DOUBLE_EQ(back.find("arr")->items()[1].asDouble(), 0.1);
  EXPECT_EQ(writeJson(back), text);
}

TEST(Json, RejectsMalformedInput) {
  const char *bad[] = {"",
                       "{",
                       "{\"a\":}",
                       "[1,]",
                       "[1 2]",
                       "{\"a\" 1}",
                       "tru",
                       "01",
                       "1.",
                       "-",
                       "\"abc",
                       "\"\\q\"",
                       "\"\\u12\"",
                       "{\"a\":1,\"a\":2}",
                       "[1] x",
                       "{1:2}",
                       "\"\\ud800\"",
                       "\"a\nb\""};
  for (const char *text : bad) {
    JsonValue v;
    Status s = parseJson(text, v);
    EXPECT_FALSE(s.ok()) << "accepted: " << text;
    EXPECT_NE(s.message().find("JSON"), std::string::npos);
  }
}

TEST(Json, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string deep(100000, '[');
  JsonValue v;
  Status s = parseJson(deep, v);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nesting"), std::string::npos) << s.toString();
}

} // namespace
