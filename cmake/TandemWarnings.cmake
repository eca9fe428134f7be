include(GNUInstallDirs)

# TANDEM_SANITIZE: OFF, ON (= address,undefined) or a -fsanitize= list.
# TANDEM_SANITIZERS is the list in force ("" when off); the consumer test
# builds README's quickstart with it too.
set(TANDEM_SANITIZERS "")
if(TANDEM_SANITIZE)
  string(TOUPPER "${TANDEM_SANITIZE}" _tandem_sanitize)
  if(_tandem_sanitize MATCHES "^(ON|YES|TRUE|Y|1)$")
    set(TANDEM_SANITIZERS address,undefined)
  else()
    set(TANDEM_SANITIZERS "${TANDEM_SANITIZE}")
  endif()
endif()

if(TANDEM_SANITIZERS)
  if(TANDEM_HAS_CUDA)
    message(FATAL_ERROR "TANDEM_SANITIZE covers the CPU parts only: configure with -DTANDEM_CUDA=OFF")
  endif()
  add_compile_options(-fsanitize=${TANDEM_SANITIZERS} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${TANDEM_SANITIZERS})
  # GCC's bounds warnings see the sanitizers' instrumentation and report
  # loops whose counts it cannot bound (e.g. a 1-slot log); the release build
  # keeps the warning and ASan checks the real accesses at run time.
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-array-bounds>)
  if(TANDEM_SANITIZERS MATCHES "thread")
    # With this, oneTBB's headers tell profiling tools where a task is
    # spawned, where it finishes and where a wait ends;
    # tests/support/tsan_tbb.cpp hands that to ThreadSanitizer, which cannot
    # see the synchronization inside the uninstrumented libtbb. (ThreadSanitizer
    # goes on after a report and fails the process at exit, exit code 66, so
    # one run shows every race.)
    add_compile_definitions(TBB_USE_PROFILING_TOOLS=2)
  else()
    add_compile_options(-fno-sanitize-recover=all)  # stop at the first report
  endif()
endif()

# Warnings for tandem's own targets (not for consumers).
function(tandem_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TANDEM_WARNINGS_AS_ERRORS}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${TANDEM_WARNINGS_AS_ERRORS}>>:-Werror=all-warnings>)
endfunction()

# One layer = one object library. It sees its own include folder and those of
# the layers it may depend on (DESIGN: arrows point down only), nothing else.
function(tandem_add_layer layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;LAYERS;LIBRARIES" ${ARGN})
  set(target tandem_${layer})
  add_library(${target} OBJECT ${ARG_SOURCES})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/${layer}/include)
  foreach(dep IN LISTS ARG_LAYERS)
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/${dep}/include)
  endforeach()
  target_link_libraries(${target} PUBLIC ${ARG_LIBRARIES})
  target_compile_features(${target} PUBLIC cxx_std_17)
  if(TANDEM_HAS_CUDA)
    target_compile_definitions(${target} PUBLIC TANDEM_HAS_CUDA=1)
  endif()
  if(TANDEM_VERIFY_FLUSHES)
    target_compile_definitions(${target} PUBLIC TANDEM_VERIFY_FLUSHES=1)
  endif()
  tandem_set_warnings(${target})
endfunction()
