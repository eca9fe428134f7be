# Finds every dependency through find_package. What is missing is installed
# from Debian packages when CMake runs as root (see TandemBootstrap.cmake);
# otherwise configuration stops with the exact command to run.
include(TandemBootstrap)

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

# name | Debian package | find_package arguments (separated by ';' inside the string)
set(_tandem_deps
  "TBB|libtbb-dev|TBB CONFIG"
  "Boost|libboost-dev|Boost 1.71")
if(TANDEM_BUILD_TESTS)
  list(APPEND _tandem_deps "GTest|libgtest-dev|GTest CONFIG")
endif()
if(TANDEM_BUILD_BENCH)
  list(APPEND _tandem_deps
    "benchmark|libbenchmark-dev|benchmark CONFIG"
    "absl|libabsl-dev|absl CONFIG"
    "CLI11|libcli11-dev|CLI11 CONFIG"
    "nlohmann_json|nlohmann-json3-dev|nlohmann_json CONFIG")
endif()
tandem_bootstrap(${_tandem_deps})

if(NOT EXISTS "${Boost_INCLUDE_DIRS}/boost/lockfree/queue.hpp")
  message(FATAL_ERROR "Boost.Lockfree headers not found under '${Boost_INCLUDE_DIRS}': install libboost-dev")
endif()
