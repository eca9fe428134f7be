# Installs the built tandem into a scratch prefix, builds the README's C++
# quickstart against it with find_package(tandem), and runs it.
cmake_minimum_required(VERSION 3.25)
foreach(var TANDEM_SOURCE_DIR TANDEM_BINARY_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "command failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(src ${WORK_DIR}/src)
run(${CMAKE_COMMAND} --install ${TANDEM_BINARY_DIR} --prefix ${prefix})

# The quickstart is the ```cpp block between the quickstart markers of README.md.
file(READ ${TANDEM_SOURCE_DIR}/README.md readme)
string(REGEX MATCH "<!-- quickstart begin -->[^`]*```cpp\n(.*)\n```[^`]*<!-- quickstart end -->" matched "${readme}")
if(NOT matched)
  message(FATAL_ERROR "README.md has no ```cpp block between <!-- quickstart begin --> and <!-- quickstart end -->")
endif()
file(WRITE ${src}/main.cpp "${CMAKE_MATCH_1}\n")
configure_file(${TANDEM_SOURCE_DIR}/tests/consumer/CMakeLists.txt ${src}/CMakeLists.txt COPYONLY)

set(flags "")
# SANITIZE: the -fsanitize= list tandem was built with ("" when none); the
# quickstart must be built with the same runtime to link against it.
if(SANITIZE)
  set(flags -DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE} -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE})
endif()
if(SANITIZE MATCHES "thread")
  # ThreadSanitizer's view of oneTBB's tasks, as in tandem_tests.
  list(APPEND flags -DTANDEM_CONSUMER_EXTRA_SOURCES=${TANDEM_SOURCE_DIR}/tests/support/tsan_tbb.cpp)
endif()
run(${CMAKE_COMMAND} -S ${src} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} ${flags})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/quickstart)
