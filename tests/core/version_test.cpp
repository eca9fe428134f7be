#include <tandem/tandem.hpp>

#include <gtest/gtest.h>

#include <cstring>

TEST(Version, MatchesProject) {
  EXPECT_STREQ(tandem::version(), "0.1.0");
}

TEST(Errors, CudaErrorNamesCallPlaceAndCode) {
  const tandem::cuda_error e("cudaMalloc(&p, n)", "alloc.cu", 42, 2, "out of memory");
  const std::string what = e.what();
  EXPECT_NE(what.find("cudaMalloc(&p, n)"), std::string::npos);
  EXPECT_NE(what.find("alloc.cu:42"), std::string::npos);
  EXPECT_NE(what.find("out of memory"), std::string::npos);
  EXPECT_EQ(e.code(), 2);
  const std::runtime_error& base = e;  // catchable as a std exception
  EXPECT_STREQ(base.what(), e.what());
}
