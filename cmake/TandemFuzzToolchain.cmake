# Included before project() when TANDEM_FUZZ is ON: the fuzz build compiles
# with clang and links libFuzzer, and the compiler must exist before
# project() enables C++.
#
# Takes the compiler the configuration names (CMAKE_CXX_COMPILER, else $CXX,
# else clang++), checks that it links a libFuzzer target with AddressSanitizer
# and UndefinedBehaviorSanitizer, and installs what is missing from Debian
# packages when CMake runs as root (tandem_apt_install):
#   - no compiler:   clang and libclang-rt-dev (Debian 12: clang 14 and its
#                    runtimes: libFuzzer, ASan, UBSan), or clang-N and
#                    libclang-rt-N-dev for a compiler named clang++-N;
#   - no libFuzzer:  libclang-rt-<major>-dev for the compiler's version.
# The check runs once per compiler (TANDEM_FUZZ_TOOLCHAIN_CHECKED).
include(${CMAKE_CURRENT_LIST_DIR}/TandemBootstrap.cmake)

if(DEFINED CMAKE_CXX_COMPILER AND NOT CMAKE_CXX_COMPILER STREQUAL "")
  set(_tf_cxx "${CMAKE_CXX_COMPILER}")
elseif(DEFINED ENV{CXX} AND NOT "$ENV{CXX}" STREQUAL "")
  set(_tf_cxx "$ENV{CXX}")
else()
  set(_tf_cxx clang++)
  set(CMAKE_CXX_COMPILER clang++ CACHE FILEPATH "C++ compiler (TANDEM_FUZZ needs clang)")
endif()

# Links a do-nothing fuzz target; sets _tf_ok and _tf_log.
function(_tandem_fuzz_probe cxx)
  set(dir "${CMAKE_BINARY_DIR}/CMakeFiles/tandem_fuzz_probe")
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${dir}/probe.cpp"
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n")
  execute_process(COMMAND "${cxx}" -fsanitize=fuzzer,address,undefined "${dir}/probe.cpp" -o "${dir}/probe"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    set(_tf_ok TRUE PARENT_SCOPE)
  else()
    set(_tf_ok FALSE PARENT_SCOPE)
  endif()
  set(_tf_log "${out}" PARENT_SCOPE)
endfunction()

find_program(_tf_path NAMES "${_tf_cxx}" NO_CACHE)
if(NOT TANDEM_FUZZ_TOOLCHAIN_CHECKED OR NOT TANDEM_FUZZ_TOOLCHAIN_CHECKED STREQUAL "${_tf_path}")
  if(NOT _tf_path)
    get_filename_component(_tf_name "${_tf_cxx}" NAME)
    if(_tf_name MATCHES "^clang\\+\\+-([0-9]+)$")
      tandem_apt_install(clang-${CMAKE_MATCH_1} libclang-rt-${CMAKE_MATCH_1}-dev)
    elseif(_tf_name MATCHES "clang")
      tandem_apt_install(clang libclang-rt-dev)
    else()
      message(FATAL_ERROR "TANDEM_FUZZ needs clang, but the C++ compiler '${_tf_cxx}' is not found and is not "
                          "clang: configure with -DCMAKE_CXX_COMPILER=clang++ (or the fuzz preset)")
    endif()
    find_program(_tf_path NAMES "${_tf_cxx}" NO_CACHE)
    if(NOT _tf_path)
      message(FATAL_ERROR "TANDEM_FUZZ: '${_tf_cxx}' is still not found after installing clang")
    endif()
  endif()

  execute_process(COMMAND "${_tf_path}" --version OUTPUT_VARIABLE _tf_version ERROR_QUIET)
  if(NOT _tf_version MATCHES "clang version ([0-9]+)")
    message(FATAL_ERROR "TANDEM_FUZZ needs clang (libFuzzer); '${_tf_path}' is not clang: "
                        "configure with -DCMAKE_CXX_COMPILER=clang++ (or the fuzz preset)")
  endif()
  set(_tf_major "${CMAKE_MATCH_1}")

  _tandem_fuzz_probe("${_tf_path}")
  if(NOT _tf_ok)
    message(STATUS "tandem: ${_tf_path} cannot link a libFuzzer target yet; installing its runtimes")
    tandem_apt_install(libclang-rt-${_tf_major}-dev)
    _tandem_fuzz_probe("${_tf_path}")
    if(NOT _tf_ok)
      message(FATAL_ERROR "TANDEM_FUZZ: '${_tf_path} -fsanitize=fuzzer,address,undefined' cannot link a fuzz "
                          "target even with libclang-rt-${_tf_major}-dev installed:\n${_tf_log}")
    endif()
  endif()
  set(TANDEM_FUZZ_TOOLCHAIN_CHECKED "${_tf_path}" CACHE INTERNAL "compiler that linked the libFuzzer probe")
  message(STATUS "tandem: fuzz toolchain ${_tf_path} (clang ${_tf_major}) links libFuzzer, ASan and UBSan")
endif()
