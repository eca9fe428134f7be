# The python preset (TANDEM_PYTHON_PACKAGE_TESTS=ON): builds the Python
# package with pip, the way a user does (`pip install ./python`), into a
# virtual environment in the build folder, and registers pytest over
# tests/python as the test. Nothing else of the project is configured here:
# pip's build (scikit-build-core) configures the project itself, with
# TANDEM_PYTHON=ON, in <build>/wheel (kept, so a rebuild is incremental).
include(${PROJECT_SOURCE_DIR}/cmake/TandemBootstrap.cmake)

set(TANDEM_PYTHON_BASE /usr/bin/python3 CACHE FILEPATH
    "Interpreter the package's virtual environment is made from (Debian's python3)")

# Debian ships venv (with ensurepip) and the C headers apart from python3.
set(_tandem_py_check "import ensurepip, os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 1)")
set(_tandem_py_rc 1)
if(EXISTS "${TANDEM_PYTHON_BASE}")
  execute_process(COMMAND "${TANDEM_PYTHON_BASE}" -c "${_tandem_py_check}" RESULT_VARIABLE _tandem_py_rc
                  OUTPUT_QUIET ERROR_QUIET)
endif()
if(NOT _tandem_py_rc EQUAL 0)
  tandem_apt_install(python3 python3-venv python3-dev)
endif()

set(TANDEM_VENV ${CMAKE_BINARY_DIR}/venv)
function(_tandem_venv_run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tandem python preset: ${what} failed (exit ${rc}): ${ARGN}")
  endif()
endfunction()
if(NOT EXISTS ${TANDEM_VENV}/bin/python)
  message(STATUS "tandem: making the virtual environment ${TANDEM_VENV}")
  _tandem_venv_run("making the virtual environment" "${TANDEM_PYTHON_BASE}" -m venv ${TANDEM_VENV})
endif()
# pip >= 23.1 for --config-settings on a local folder with build isolation off.
_tandem_venv_run("upgrading pip" ${TANDEM_VENV}/bin/python -m pip install -q --upgrade "pip>=23.1")
_tandem_venv_run("installing python/requirements-test.txt" ${TANDEM_VENV}/bin/python -m pip install -q
                 -r ${PROJECT_SOURCE_DIR}/python/requirements-test.txt)

add_custom_target(python_package ALL
  COMMAND ${TANDEM_VENV}/bin/python -m pip install --no-build-isolation --no-deps
          --config-settings=build-dir=${CMAKE_BINARY_DIR}/wheel ${PROJECT_SOURCE_DIR}/python
  COMMENT "pip install ./python into ${TANDEM_VENV}"
  USES_TERMINAL VERBATIM)

enable_testing()
add_test(NAME python.pytest
         COMMAND ${TANDEM_VENV}/bin/python -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/tests/python
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
# The test must use the installed package, never the source folder.
set_tests_properties(python.pytest PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
