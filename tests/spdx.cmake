# SPDX-License-Identifier: MIT
# Every source file of the project carries the license identifier.
# Input: SOURCE_DIR
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/src/* ${SOURCE_DIR}/emu/* ${SOURCE_DIR}/include/* ${SOURCE_DIR}/tests/*
  ${SOURCE_DIR}/tools/* ${SOURCE_DIR}/examples/* ${SOURCE_DIR}/bench/* ${SOURCE_DIR}/scripts/*
  ${SOURCE_DIR}/cmake/* ${SOURCE_DIR}/.ci/* ${SOURCE_DIR}/python/*)
list(APPEND files CMakeLists.txt)
set(missing "")
set(count 0)
foreach(f IN LISTS files)
  if(f MATCHES "(__pycache__|\\.pyc$|^tests/fuzz_corpus/)") # fuzz inputs are data
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${f} head LIMIT_COUNT 3)
  if(NOT head MATCHES "SPDX-License-Identifier: MIT")
    list(APPEND missing ${f})
  endif()
  math(EXPR count "${count} + 1")
endforeach()
if(missing)
  message(FATAL_ERROR "no SPDX-License-Identifier in the first lines of: ${missing}")
endif()
message(STATUS "${count} files carry SPDX-License-Identifier: MIT")
