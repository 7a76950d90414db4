# GoogleTest for the C++ test suite. Read only when MMA_NMT_BUILD_TESTS=ON: a plain `pip install .` never needs it.
#
# Where it comes from, first match wins:
#   1. an installed GoogleTest: Debian/Ubuntu's libgtest-dev, a conda or Homebrew package, or the prefix named by
#      -DGTest_ROOT=<prefix>;
#   2. its source, built here with the suite: -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=<dir> names an unpacked release
#      (scripts/setup.sh passes Debian's `googletest` source package this way when it can fetch it without root),
#      else the release 1.12.1 tarball is downloaded from GitHub and checked against its SHA-256.
find_package(GTest QUIET)
if(GTest_FOUND)
  message(STATUS "mma_nmt: using the installed GoogleTest ${GTest_VERSION}")
else()
  include(FetchContent)
  if(FETCHCONTENT_SOURCE_DIR_GOOGLETEST)
    message(STATUS "mma_nmt: building GoogleTest from ${FETCHCONTENT_SOURCE_DIR_GOOGLETEST}")
  else()
    message(STATUS "mma_nmt: no installed GoogleTest; downloading release 1.12.1 (needs access to GitHub; or install "
                   "libgtest-dev, or pass -DGTest_ROOT=<prefix> or -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=<source dir>)")
  endif()
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  FetchContent_Declare(googletest
    URL https://github.com/google/googletest/archive/refs/tags/release-1.12.1.tar.gz
    URL_HASH SHA256=81964fe578e9bd7c94dfdb09c8e4d6e6759e19967e397dbea48d1c10e45d0df2)
  FetchContent_MakeAvailable(googletest)  # defines GTest::gtest and GTest::gtest_main, as find_package does
endif()
