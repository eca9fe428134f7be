# tandem_apt_install(<debian-package>...)
#
# Installs Debian packages with apt-get when CMake runs as root on a
# Debian-like system; otherwise stops configuration and prints the one
# command that installs them. Usable before project() (the fuzz build
# installs its compiler this way, see TandemFuzzToolchain.cmake).
function(tandem_apt_install)
  list(JOIN ARGN " " _pkg_list)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  find_program(TANDEM_APT_GET apt-get)
  if(NOT _uid STREQUAL "0" OR NOT TANDEM_APT_GET)
    message(FATAL_ERROR
      "tandem: missing dependencies (${_pkg_list}). Install them with:\n"
      "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${_pkg_list}\n"
      "then configure again (or run CMake as root and tandem installs them itself).")
  endif()
  message(STATUS "tandem bootstrap: installing ${_pkg_list} with apt-get")
  set(ENV{DEBIAN_FRONTEND} noninteractive)
  execute_process(COMMAND ${TANDEM_APT_GET} update -qq RESULT_VARIABLE _rc_update)
  execute_process(COMMAND ${TANDEM_APT_GET} install -y -qq --no-install-recommends ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "tandem bootstrap: 'apt-get install ${_pkg_list}' failed "
                        "(exit ${_rc}; apt-get update exit ${_rc_update})")
  endif()
endfunction()

# tandem_bootstrap("<Name>|<debian-package>|<find_package args>" ...)
#
# Tries find_package for each entry. Entries that are not found are installed
# with apt-get when CMake runs as root on a Debian-like system, then found
# again (REQUIRED). When not root, configuration stops and prints the one
# command that installs everything missing. A macro, so that the variables
# find_package sets (Boost_INCLUDE_DIRS, ...) reach the caller.
macro(_tandem_find_entry _tb_entry _tb_mode)
  string(REPLACE "|" ";" _tb_parts "${_tb_entry}")
  list(GET _tb_parts 0 _tb_name)
  list(GET _tb_parts 1 _tb_pkg)
  list(GET _tb_parts 2 _tb_args)
  string(REPLACE " " ";" _tb_args "${_tb_args}")
  find_package(${_tb_args} ${_tb_mode})
endmacro()

macro(tandem_bootstrap)
  set(_tb_missing_pkgs "")
  set(_tb_missing "")
  foreach(_tb_e IN ITEMS ${ARGN})
    _tandem_find_entry("${_tb_e}" QUIET)
    if(NOT ${_tb_name}_FOUND)
      list(APPEND _tb_missing_pkgs ${_tb_pkg})
      list(APPEND _tb_missing "${_tb_e}")
    endif()
  endforeach()

  if(_tb_missing_pkgs)
    tandem_apt_install(${_tb_missing_pkgs})
    foreach(_tb_e IN LISTS _tb_missing)
      _tandem_find_entry("${_tb_e}" REQUIRED)
    endforeach()
  endif()
endmacro()
