// SPDX-License-Identifier: MIT
// The method registry, option descriptions and the quick-spec grammar (moewb/methods/*.h).
#include <gtest/gtest.h>

#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/methods/spec.h"

namespace {

using moewb::methods::MethodRegistry;
using moewb::methods::parseMethodSpec;

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const moewb::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MethodRegistry, ListsTheBuiltInsFirstAndFindsByName) {
  const auto all = MethodRegistry::instance().all();
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(all[0]->name(), "rtn");
  EXPECT_EQ(all[1]->name(), "hqq");
  EXPECT_EQ(all[2]->name(), "milo");
  EXPECT_TRUE(all[2]->usesRankPolicy());
  EXPECT_FALSE(all[0]->usesRankPolicy());
  EXPECT_EQ(MethodRegistry::instance().find("nope"), nullptr);
}

TEST(MethodRegistry, AnUnknownMethodIsAnErrorNamingTheKnownOnes) {
  const std::string e = errorOf([] { moewb::methods::weightMethod("gptq-9", "quantize: --method"); });
  EXPECT_NE(e.find("quantize: --method: unknown method 'gptq-9'"), std::string::npos) << e;
  EXPECT_NE(e.find("rtn, hqq, milo"), std::string::npos) << e;
}

TEST(MethodRegistry, RefusesASecondMethodOfTheSameName) {
  class Dummy final : public moewb::methods::WeightMethod {
   public:
    std::string_view name() const override { return "rtn"; }
    std::string_view title() const override { return "dup"; }
    std::string_view summary() const override { return "dup"; }
    const std::vector<moewb::methods::OptionSpec>& options() const override { return options_; }
    void validate(const moewb::quant::QuantizeSettings&) const override {}
    moewb::methods::PredictedSize predictedSize(const moewb::quant::QuantizeSettings&, int64_t, int64_t,
                                                int) const override {
      return {};
    }
    moewb::quant::QuantizedMatrix quantize(const moewb::MatrixRM&, const moewb::quant::QuantizeSettings&,
                                           int, uint64_t, int, const moewb::methods::IterationCallback&,
                                           const moewb::quant::MatrixHessian*) const override {
      return {};
    }
    std::vector<moewb::methods::OptionSpec> options_;
  };
  const std::string e = errorOf([] { MethodRegistry::instance().add(std::make_unique<Dummy>()); });
  EXPECT_NE(e.find("registered twice"), std::string::npos) << e;
}

TEST(MethodSpec, PositionalAndKeyedFieldsSetTheMethodsOptions) {
  const auto hqq = parseMethodSpec("hqq:4:group=128");
  EXPECT_EQ(hqq.method->name(), "hqq");
  EXPECT_EQ(hqq.settings.method, "hqq");
  EXPECT_EQ(hqq.settings.grouped.bits, 4);
  EXPECT_EQ(hqq.settings.grouped.group, 128);
  const auto rtn = parseMethodSpec("rtn");
  EXPECT_EQ(rtn.settings.grouped.bits, 3);  // the registered default
  EXPECT_EQ(rtn.settings.grouped.group, 64);
  const auto milo = parseMethodSpec("milo:3:compensator=int8:max-iters=5:svd=randomized");
  EXPECT_EQ(milo.settings.milo.compensator, moewb::quant::CompensatorFormat::Int8);
  EXPECT_EQ(milo.settings.milo.max_iters, 5);
  EXPECT_EQ(milo.settings.milo.svd.method, moewb::quant::SvdMethod::Randomized);
  EXPECT_TRUE(milo.policy.empty());
}

TEST(MethodSpec, ARankPolicyKeepsItsSemicolonsAndEqualsAndOptionsMayFollowIt) {
  const auto milo = parseMethodSpec("milo:2:sparse-8;*.q_proj.weight=16:compensator=fp16");
  EXPECT_EQ(milo.settings.grouped.bits, 2);
  EXPECT_EQ(milo.policy, "sparse-8;*.q_proj.weight=16");
  EXPECT_EQ(milo.settings.milo.compensator, moewb::quant::CompensatorFormat::Fp16);
}

TEST(MethodSpec, MalformedSpecsSayWhatWasExpected) {
  std::string e = errorOf([] { parseMethodSpec("hqq:5"); });
  EXPECT_NE(e.find("quick spec 'hqq:5': bits '5' is not 2, 3, 4 or 8"), std::string::npos) << e;
  e = errorOf([] { parseMethodSpec("awq:4"); });
  EXPECT_NE(e.find("unknown method 'awq'"), std::string::npos) << e;
  EXPECT_NE(e.find("milo:BITS:POLICY"), std::string::npos) << e;
  e = errorOf([] { parseMethodSpec("rtn:3:4"); });
  EXPECT_NE(e.find("unexpected field '4'"), std::string::npos) << e;
  e = errorOf([] { parseMethodSpec("rtn:3:rank=4"); });
  EXPECT_NE(e.find("method rtn has no option 'rank' (options: bits, group)"), std::string::npos) << e;
  e = errorOf([] { parseMethodSpec("rtn:"); });
  EXPECT_NE(e.find("nothing after ':'"), std::string::npos) << e;
  e = errorOf([] { parseMethodSpec("hqq:3:group=0"); });
  EXPECT_NE(e.find("an integer in 1..65536"), std::string::npos) << e;
  e = errorOf([] { parseMethodSpec("hqq:99999999999999999999"); });
  EXPECT_NE(e.find("is not 2, 3, 4 or 8"), std::string::npos) << e;
}

TEST(MethodOptions, DefaultsMatchTheSettingsStructsDefaults) {
  // The registry's defaults are what a QuantizeSettings{} of that method already held before options
  // were data; a drift here would change every export made without flags.
  for (const char* name : {"rtn", "hqq", "milo"}) {
    SCOPED_TRACE(name);
    const moewb::quant::QuantizeSettings d = moewb::methods::weightMethod(name).defaults();
    moewb::quant::QuantizeSettings plain;
    plain.method = name;
    EXPECT_EQ(moewb::methods::weightMethod(name).settingsJson(d), moewb::methods::weightMethod(name).settingsJson(plain));
  }
}

}  // namespace
