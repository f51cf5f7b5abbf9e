// Configuration: parsing, validation and error messages of HDSM_* knobs.
#include <hdsm/config.hpp>
#include <hdsm/error.hpp>

#include "device/sim/peer_groups.hpp"
#include "runtime/knobs.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

std::string config_error(const std::string& name, const std::string& value) {
  try {
    hdsm::Config::defaults().set(name, value);
  } catch (const hdsm::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsCoverEveryKnob) {
  const auto c = hdsm::Config::defaults();
  for (const auto& k : hdsm::knobs()) {
    EXPECT_NO_THROW((void)c.get(k.name)) << k.name;
    EXPECT_TRUE(std::string(k.name).starts_with("HDSM_")) << k.name;
    EXPECT_FALSE(k.description.empty()) << k.name;
  }
  EXPECT_EQ(c.integer("HDSM_SIM_DEVICES"), 2);
  EXPECT_EQ(c.size("HDSM_SIM_MEMORY"), std::uint64_t{4} << 30);
  EXPECT_DOUBLE_EQ(c.real("HDSM_SIM_LATENCY_US"), 5.0);
  EXPECT_FALSE(c.boolean("HDSM_SIM_POISON"));
}

TEST(Config, DefaultsAreValidValues) {
  for (const auto& k : hdsm::knobs())
    EXPECT_NO_THROW(hdsm::Config::defaults().set(k.name, k.default_value)) << k.name;
}

TEST(Config, ProgrammaticSettingsAreTyped) {
  auto c = hdsm::Config::defaults();
  c.set("HDSM_SIM_DEVICES", "4").set("HDSM_SIM_MEMORY", "64MiB").set("HDSM_SIM_POISON", "on");
  EXPECT_EQ(c.integer("HDSM_SIM_DEVICES"), 4);
  EXPECT_EQ(c.size("HDSM_SIM_MEMORY"), std::uint64_t{64} << 20);
  EXPECT_TRUE(c.boolean("HDSM_SIM_POISON"));
  c.set("HDSM_SIM_MEMORY", "1.5G");
  EXPECT_EQ(c.size("HDSM_SIM_MEMORY"), std::uint64_t{3} << 29);
}

TEST(Config, InvalidValuesNameVariableValueAndRange) {
  const std::string e = config_error("HDSM_SIM_DEVICES", "abc");
  EXPECT_NE(e.find("HDSM_SIM_DEVICES"), std::string::npos) << e;
  EXPECT_NE(e.find("abc"), std::string::npos) << e;
  EXPECT_NE(e.find("1..64"), std::string::npos) << e;
  EXPECT_NE(config_error("HDSM_SIM_DEVICES", "0"), "");
  EXPECT_NE(config_error("HDSM_SIM_DEVICES", "65"), "");
  EXPECT_NE(config_error("HDSM_SIM_DEVICES", "2x"), "");
  EXPECT_NE(config_error("HDSM_SIM_MEMORY", "lots"), "");
  EXPECT_NE(config_error("HDSM_SIM_MEMORY", "12 parsecs"), "");
  EXPECT_NE(config_error("HDSM_SIM_MEMORY", "1KiB"), "");  // below the 1 MiB minimum
  EXPECT_NE(config_error("HDSM_SIM_LINK_GBPS", "-1"), "");
  EXPECT_NE(config_error("HDSM_SIM_LINK_GBPS", "nan"), "");
  // A rate that small would overflow a copy's modelled time; 0 (off) and 1e-6 are fine.
  EXPECT_NE(config_error("HDSM_SIM_LINK_GBPS", "1e-300").find("too small"), std::string::npos);
  EXPECT_EQ(config_error("HDSM_SIM_LINK_GBPS", "1e-6"), "");
  EXPECT_EQ(config_error("HDSM_SIM_LINK_GBPS", "0"), "");
  EXPECT_NE(config_error("HDSM_SIM_POISON", "maybe"), "");
  EXPECT_NE(config_error("HDSM_SIM_PEER", "0-x"), "");
  EXPECT_NE(config_error("HDSM_NO_SUCH_KNOB", "1"), "");
  // Sizes that must be powers of two are refused by the parser, so that `hdsm info` refuses them
  // as every program does (before, only the first allocation did).
  EXPECT_NE(config_error("HDSM_BLOCK_SIZE", "12KiB").find("not a power of two"), std::string::npos);
  EXPECT_NE(config_error("HDSM_CRC_PAGE_SIZE", "3000").find("not a power of two"), std::string::npos);
  EXPECT_NE(config_error("HDSM_ARENA_SEGMENT", "3GiB").find("not a power of two"), std::string::npos);
  EXPECT_EQ(config_error("HDSM_BLOCK_SIZE", "64KiB"), "");
}

// Found by an audit of every knob: values the documentation refuses that were accepted, and
// spellings it accepts elsewhere that were refused.
TEST(Config, EveryKnobRefusesWhatItsDocumentationRefuses) {
  // "0 or 1MiB..1TiB": the sizes between are no device memory (a 4 KiB OpenCL device was listed).
  for (const char* knob : {"HDSM_OPENCL_MEMORY", "HDSM_CUDA_MEMORY"}) {
    EXPECT_EQ(config_error(knob, "0"), "") << knob;
    EXPECT_NE(config_error(knob, "4096").find("out of range"), std::string::npos) << knob;
    EXPECT_EQ(config_error(knob, "1MiB"), "") << knob;
  }
  EXPECT_NE(config_error("HDSM_CLUSTER_MAPPINGS", "3"), "");  // "0, or 5..2^31"
  EXPECT_EQ(config_error("HDSM_CLUSTER_MAPPINGS", "0"), "");
  EXPECT_EQ(config_error("HDSM_CLUSTER_MAPPINGS", "5"), "");
  EXPECT_NE(config_error("HDSM_STAGING_BYTES", "0"), "");  // a pool of no chunk
  // HDSM_DEVICE: a backend and an index, case-insensitive as every choice.
  EXPECT_NE(config_error("HDSM_DEVICE", "bogus").find("'bogus' is no backend"), std::string::npos);
  EXPECT_NE(config_error("HDSM_DEVICE", "cudafoo"), "");
  EXPECT_NE(config_error("HDSM_DEVICE", "sim:"), "");
  EXPECT_NE(config_error("HDSM_DEVICE", "sim:x"), "");
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_DEVICE", " OpenCL:1 ").get("HDSM_DEVICE"), "opencl:1");
  // HDSM_SKELETON_DEVICES: default, all, or indices, each once.
  EXPECT_NE(config_error("HDSM_SKELETON_DEVICES", "bogus"), "");
  EXPECT_NE(config_error("HDSM_SKELETON_DEVICES", ""), "");
  EXPECT_NE(config_error("HDSM_SKELETON_DEVICES", "0,0").find("named twice"), std::string::npos);
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_SKELETON_DEVICES", "0, 2").get("HDSM_SKELETON_DEVICES"),
            "0,2");
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_SKELETON_DEVICES", "ALL").get("HDSM_SKELETON_DEVICES"), "all");
  // HDSM_CACHE_DIR: off in any case (OFF made a folder of that name); no relative folder.
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_CACHE_DIR", "OFF").get("HDSM_CACHE_DIR"), "off");
  EXPECT_NE(config_error("HDSM_CACHE_DIR", "cache").find("not an absolute path"), std::string::npos);
  EXPECT_EQ(config_error("HDSM_CACHE_DIR", "/var/cache/hdsm"), "");
  EXPECT_EQ(config_error("HDSM_CACHE_DIR", ""), "");
  // HDSM_SIM_PEER as every choice: trimmed and case-insensitive, spaces in lists.
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_SIM_PEER", " ALL").get("HDSM_SIM_PEER"), "all");
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_SIM_PEER", "0-1, 2-3").get("HDSM_SIM_PEER"), "0-1,2-3");
  // A choice with on and off (or 1 and 0) takes a boolean's spellings.
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_OPENCL", "yes").get("HDSM_OPENCL"), "on");
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_CUDA", "0").get("HDSM_CUDA"), "off");
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_CLUSTER_CHECK_RACES", "on").get("HDSM_CLUSTER_CHECK_RACES"),
            "1");
  EXPECT_EQ(hdsm::Config::defaults().set("HDSM_SIM_BOUNDS_CHECK", "TRUE").get("HDSM_SIM_BOUNDS_CHECK"), "on");
  EXPECT_NE(config_error("HDSM_SIM_KIND", "yes"), "");  // no on/off among its choices
}

// Knobs that must fit each other: refused when a runtime starts, naming both.
TEST(Config, KnobsThatMustFitEachOtherAreCheckedTogether) {
  const auto relation_error = [](hdsm::Config c) {
    try {
      hdsm::check_knob_relations(c);
    } catch (const hdsm::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(relation_error(hdsm::Config::defaults()), "");
  EXPECT_NE(relation_error(
                hdsm::Config::defaults().set("HDSM_STAGING_BYTES", "1MiB").set("HDSM_STAGING_CHUNK", "2MiB"))
                .find("HDSM_STAGING_BYTES=1 MiB is less than one HDSM_STAGING_CHUNK=2 MiB"),
            std::string::npos);
  EXPECT_NE(relation_error(
                hdsm::Config::defaults().set("HDSM_MPI_STAGING_BYTES", "1MiB").set("HDSM_MPI_CHUNK", "1MiB"))
                .find("less than two HDSM_MPI_CHUNK"),
            std::string::npos);
  EXPECT_NE(relation_error(hdsm::Config::defaults().set("HDSM_CRC_LOCAL_STORE", "2KiB")), "");
  EXPECT_EQ(
      relation_error(
          hdsm::Config::defaults().set("HDSM_CRC_LOCAL_STORE", "2KiB").set("HDSM_CRC_PAGE_SIZE", "1KiB")),
      "");
}

TEST(Config, UnknownEnvironmentVariableIsAnError) {
  ::setenv("HDSM_SIM_DEVICEZ", "3", 1);
  try {
    (void)hdsm::Config::from_environment();
    ADD_FAILURE() << "an unknown HDSM_ variable was accepted";
  } catch (const hdsm::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_SIM_DEVICEZ"), std::string::npos);
  }
  ::unsetenv("HDSM_SIM_DEVICEZ");
}

TEST(Config, EnvironmentOverridesDefaults) {
  ::setenv("HDSM_SIM_DEVICES", "3", 1);
  EXPECT_EQ(hdsm::Config::from_environment().integer("HDSM_SIM_DEVICES"), 3);
  ::setenv("HDSM_SIM_DEVICES", "many", 1);
  EXPECT_THROW((void)hdsm::Config::from_environment(), hdsm::ConfigError);
  ::unsetenv("HDSM_SIM_DEVICES");
}

TEST(Config, ParseSize) {
  EXPECT_EQ(hdsm::parse_size("4096"), 4096u);
  EXPECT_EQ(hdsm::parse_size("64K"), 65536u);
  EXPECT_EQ(hdsm::parse_size("64 KiB"), 65536u);
  EXPECT_EQ(hdsm::parse_size("2MB"), 2u << 20);
  EXPECT_THROW(hdsm::parse_size(""), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::parse_size("K"), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::parse_size("0.3"), hdsm::InvalidArgument);
}

TEST(PeerGroups, Parse) {
  using V = std::vector<int>;
  EXPECT_EQ(hdsm::parse_peer_groups("all", 3), (V{0, 0, 0}));
  EXPECT_EQ(hdsm::parse_peer_groups("none", 2), (V{-1, -1}));
  EXPECT_EQ(hdsm::parse_peer_groups("0-1,2-3", 4), (V{0, 0, 1, 1}));
  EXPECT_EQ(hdsm::parse_peer_groups("1-2", 4), (V{-1, 0, 0, -1}));
  EXPECT_THROW(hdsm::parse_peer_groups("0-1,1-2", 4), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::parse_peer_groups("2-1", 4), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::parse_peer_groups("0-4", 4), hdsm::InvalidArgument);
  // A variable set to nothing, and a list with an empty item anywhere, are no lists (empty meant
  // none, while the default is all; a trailing comma passed where ",," did not).
  EXPECT_THROW(hdsm::parse_peer_groups("", 4), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::parse_peer_groups("0-1,2-3,", 4), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::parse_peer_groups("0-1,,2-3", 4), hdsm::InvalidArgument);
}

}  // namespace
