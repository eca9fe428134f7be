# TANDEM_FUZZ: every target of the build is instrumented for libFuzzer's
# coverage (-fsanitize=fuzzer-no-link) and built with AddressSanitizer and
# UndefinedBehaviorSanitizer (unless TANDEM_SANITIZE already chose
# sanitizers); the fuzz targets in tests/fuzz link libFuzzer itself
# (-fsanitize=fuzzer). TandemFuzzToolchain.cmake made sure, before project(),
# that the compiler is clang and has the runtimes.
if(NOT TANDEM_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TANDEM_FUZZ needs clang (libFuzzer), the C++ compiler is ${CMAKE_CXX_COMPILER_ID}: "
                      "configure a fresh build folder with -DCMAKE_CXX_COMPILER=clang++ (or the fuzz preset)")
endif()
if(TANDEM_HAS_CUDA)
  message(FATAL_ERROR "TANDEM_FUZZ covers the CPU parts only: configure with -DTANDEM_CUDA=OFF")
endif()
if(NOT TANDEM_BUILD_TESTS)
  message(FATAL_ERROR "TANDEM_FUZZ builds the targets in tests/fuzz: configure with -DTANDEM_BUILD_TESTS=ON")
endif()
if(TANDEM_SANITIZERS MATCHES "thread|memory")
  message(FATAL_ERROR "TANDEM_FUZZ runs with AddressSanitizer; TANDEM_SANITIZE=${TANDEM_SANITIZE} cannot be combined with it")
endif()

add_compile_options(-fsanitize=fuzzer-no-link)
if(NOT TANDEM_SANITIZERS)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
