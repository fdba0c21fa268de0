// Environment variable parsing: accepted forms and the error messages for rejected ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/env.h"
#include "runtime/error.h"

using namespace neuron::rt;

namespace {

// Returns the ConfigError message thrown by fn, or fails the test.
template <typename F>
std::string config_error(F fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ConfigError";
  return "";
}

// Sets (or unsets) a variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

TEST(ParseInt, AcceptsIntegersInRange) {
  EXPECT_EQ(parse_int("V", "42", 0, 100), 42);
  EXPECT_EQ(parse_int("V", " 7 ", 0, 100), 7);
  EXPECT_EQ(parse_int("V", "-3", -5, 5), -3);
  EXPECT_EQ(parse_int("V", "+4", 0, 5), 4);
  EXPECT_EQ(parse_int("V", "0", 0, 0), 0);
  EXPECT_EQ(parse_int("V", "9223372036854775807", 0, INT64_MAX), INT64_MAX);
}

TEST(ParseInt, RejectsWithVariableValueAndRange) {
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "abc", 0, 10); }),
            "NEURON_X=abc: expected an integer in [0, 10]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "11", 0, 10); }),
            "NEURON_X=11: expected an integer in [0, 10]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "-1", 0, 10); }),
            "NEURON_X=-1: expected an integer in [0, 10]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "12abc", 0, 100); }),
            "NEURON_X=12abc: expected an integer in [0, 100]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "", 0, 100); }),
            "NEURON_X=: expected an integer in [0, 100]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "1.5", 0, 100); }),
            "NEURON_X=1.5: expected an integer in [0, 100]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "99999999999999999999", 0, INT64_MAX); }),
            "NEURON_X=99999999999999999999: expected an integer in [0, 9223372036854775807]");
  EXPECT_EQ(config_error([] { parse_int("NEURON_X", "-", 0, 1); }),
            "NEURON_X=-: expected an integer in [0, 1]");
}

TEST(ParseDouble, AcceptsNumbersInRange) {
  EXPECT_DOUBLE_EQ(parse_double("V", "0.5", 0, 10), 0.5);
  EXPECT_DOUBLE_EQ(parse_double("V", "1e1", 0, 10), 10.0);
  EXPECT_DOUBLE_EQ(parse_double("V", " 3 ", 0, 10), 3.0);
}

TEST(ParseDouble, RejectsGarbageNonFiniteAndOutOfRange) {
  for (const char* bad : {"abc", "1.5x", "nan", "inf", "", "11"}) {
    const std::string msg = config_error([&] { parse_double("NEURON_Y", bad, 0, 10); });
    EXPECT_EQ(msg, std::string("NEURON_Y=") + bad + ": expected a number in [0, 10]");
  }
}

TEST(ParseBool, AcceptsAllSpellingsCaseInsensitive) {
  for (const char* t : {"1", "true", "TRUE", "Yes", "on", " ON "})
    EXPECT_TRUE(parse_bool("B", t)) << t;
  for (const char* f : {"0", "false", "False", "no", "OFF"}) EXPECT_FALSE(parse_bool("B", f)) << f;
}

TEST(ParseBool, RejectsOthersNamingTheAllowedSet) {
  EXPECT_EQ(
      config_error([] { parse_bool("NEURON_LAUNCH_BLOCKING", "maybe"); }),
      "NEURON_LAUNCH_BLOCKING=maybe: expected a boolean (1, 0, true, false, yes, no, on, off)");
  EXPECT_EQ(config_error([] { parse_bool("NEURON_LAUNCH_BLOCKING", "2"); }),
            "NEURON_LAUNCH_BLOCKING=2: expected a boolean (1, 0, true, false, yes, no, on, off)");
}

TEST(GetEnv, StrDistinguishesUnsetFromEmpty) {
  {
    ScopedEnv e("NEURON_EMU_TEST_STR", nullptr);
    EXPECT_FALSE(getenv_str("NEURON_EMU_TEST_STR").has_value());
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_STR", "");
    ASSERT_TRUE(getenv_str("NEURON_EMU_TEST_STR").has_value());
    EXPECT_EQ(*getenv_str("NEURON_EMU_TEST_STR"), "");
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_STR", "abc");
    EXPECT_EQ(getenv_str("NEURON_EMU_TEST_STR").value_or(""), "abc");
  }
}

TEST(GetEnv, IntUsesDefaultWhenUnsetOrEmpty) {
  {
    ScopedEnv e("NEURON_EMU_TEST_INT", nullptr);
    EXPECT_EQ(getenv_int("NEURON_EMU_TEST_INT", 5, 0, 10), 5);
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_INT", "");
    EXPECT_EQ(getenv_int("NEURON_EMU_TEST_INT", 5, 0, 10), 5);
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_INT", "8");
    EXPECT_EQ(getenv_int("NEURON_EMU_TEST_INT", 5, 0, 10), 8);
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_INT", "80");
    EXPECT_EQ(config_error([] { getenv_int("NEURON_EMU_TEST_INT", 5, 0, 10); }),
              "NEURON_EMU_TEST_INT=80: expected an integer in [0, 10]");
  }
}

TEST(GetEnv, BoolUsesDefaultWhenUnsetAndParsesOtherwise) {
  {
    ScopedEnv e("NEURON_EMU_TEST_BOOL", nullptr);
    EXPECT_TRUE(getenv_bool("NEURON_EMU_TEST_BOOL", true));
    EXPECT_FALSE(getenv_bool("NEURON_EMU_TEST_BOOL", false));
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_BOOL", "off");
    EXPECT_FALSE(getenv_bool("NEURON_EMU_TEST_BOOL", true));
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_BOOL", "yes");
    EXPECT_TRUE(getenv_bool("NEURON_EMU_TEST_BOOL", false));
  }
  {
    ScopedEnv e("NEURON_EMU_TEST_BOOL", "nope");
    EXPECT_EQ(
        config_error([] { getenv_bool("NEURON_EMU_TEST_BOOL", false); }),
        "NEURON_EMU_TEST_BOOL=nope: expected a boolean (1, 0, true, false, yes, no, on, off)");
  }
}
