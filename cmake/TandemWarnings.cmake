include(GNUInstallDirs)

if(TANDEM_SANITIZE)
  if(TANDEM_HAS_CUDA)
    message(FATAL_ERROR "TANDEM_SANITIZE covers the CPU parts only: configure with -DTANDEM_CUDA=OFF")
  endif()
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  # GCC's bounds warnings see the sanitizer's instrumentation and report loops
  # whose counts it cannot bound (e.g. a 1-slot log); ASan checks the real
  # accesses at run time instead.
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-array-bounds>)
  add_link_options(-fsanitize=address,undefined)
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
