# SPDX-License-Identifier: MIT
# Fails when the shared library records libcuda as a dependency.
execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIB} failed")
endif()
if(out MATCHES "libcuda")
  message(FATAL_ERROR "${LIB} links libcuda:\n${out}")
endif()
if(NOT out MATCHES "SONAME.*libpinstage\\.so\\.")
  message(FATAL_ERROR "${LIB} has no versioned SONAME:\n${out}")
endif()
string(REGEX MATCHALL "NEEDED[^\n]*" needed "${out}")
message(STATUS "${needed}")
