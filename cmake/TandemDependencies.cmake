# Finds every dependency through find_package. What is missing is installed
# from Debian packages when CMake runs as root (see TandemBootstrap.cmake);
# otherwise configuration stops with the exact command to run.
include(TandemBootstrap)

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

# name | Debian package | find_package arguments (separated by ';' inside the string).
# xxHash checksums snapshot files, header-only (cmake/FindxxHash.cmake); 0.8
# is its first release with a stable XXH3.
set(_tandem_deps
  "TBB|libtbb-dev|TBB CONFIG"
  "Boost|libboost-dev|Boost 1.71"
  "xxHash|libxxhash-dev|xxHash 0.8")
if(TANDEM_BUILD_TESTS)
  list(APPEND _tandem_deps "GTest|libgtest-dev|GTest CONFIG")
endif()
if(TANDEM_BUILD_BENCH)
  list(APPEND _tandem_deps
    "benchmark|libbenchmark-dev|benchmark CONFIG"
    "absl|libabsl-dev|absl CONFIG"
    "CLI11|libcli11-dev|CLI11 CONFIG"
    "nlohmann_json|nlohmann-json3-dev|nlohmann_json CONFIG")
  # gnuplot renders tandem-bench --plot. It is optional (without it --plot
  # writes the gnuplot script and says so), so it joins the list only where
  # the bootstrap can install it: as root with apt-get (CMake's FindGnuplot;
  # gnuplot-nox has the png/pngcairo terminals without X11). bench/ then finds
  # it with find_program.
  execute_process(COMMAND id -u OUTPUT_VARIABLE _tandem_uid OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_program(TANDEM_APT_GET apt-get)
  if(_tandem_uid STREQUAL "0" AND TANDEM_APT_GET)
    list(APPEND _tandem_deps "Gnuplot|gnuplot-nox|Gnuplot")
  endif()
endif()
tandem_bootstrap(${_tandem_deps})

if(NOT EXISTS "${Boost_INCLUDE_DIRS}/boost/lockfree/queue.hpp")
  message(FATAL_ERROR "Boost.Lockfree headers not found under '${Boost_INCLUDE_DIRS}': install libboost-dev")
endif()
