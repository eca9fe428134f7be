# Finds the headers of xxHash (Debian package libxxhash-dev), which tandem
# uses header-only (XXH_INLINE_ALL in the .cpp files that hash): no library
# is looked for or linked, and nothing of xxHash reaches tandem's consumers.
#
#   xxHash_FOUND, xxHash_INCLUDE_DIR, xxHash_VERSION
#   xxHash::xxHash   INTERFACE imported target: the include folder
find_path(xxHash_INCLUDE_DIR NAMES xxhash.h)
if(xxHash_INCLUDE_DIR)
  file(STRINGS "${xxHash_INCLUDE_DIR}/xxhash.h" _xxhash_defines
       REGEX "^#define XXH_VERSION_(MAJOR|MINOR|RELEASE) +[0-9]+")
  foreach(_xxhash_part IN ITEMS MAJOR MINOR RELEASE)
    string(REGEX REPLACE ".*#define XXH_VERSION_${_xxhash_part} +([0-9]+).*" "\\1"
           _xxhash_${_xxhash_part} "${_xxhash_defines}")
  endforeach()
  set(xxHash_VERSION "${_xxhash_MAJOR}.${_xxhash_MINOR}.${_xxhash_RELEASE}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxHash REQUIRED_VARS xxHash_INCLUDE_DIR VERSION_VAR xxHash_VERSION)
mark_as_advanced(xxHash_INCLUDE_DIR)

if(xxHash_FOUND AND NOT TARGET xxHash::xxHash)
  add_library(xxHash::xxHash INTERFACE IMPORTED)
  set_target_properties(xxHash::xxHash PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${xxHash_INCLUDE_DIR}")
endif()
