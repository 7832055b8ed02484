# SPDX-License-Identifier: MIT
# The public header compiles without a warning under -pedantic in C11, C17
# and C++11/17, and under C99 stops with a message that names the standard
# it needs. Inputs: CC CXX INCLUDE WORK_DIR
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/h.c "#include <pinstage.h>\nint main(void) { return pinstage_version_number() == 0; }\n")
file(WRITE ${WORK_DIR}/h.cpp "#include <pinstage.h>\nint main() { return pinstage_version_number() == 0; }\n")
function(compile expect_ok compiler std file)
  execute_process(COMMAND ${compiler} -std=${std} -Wall -Wextra -pedantic -Werror -fsyntax-only -I${INCLUDE} ${file}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "pinstage.h under -std=${std} -pedantic -Werror:\n${err}")
  elseif(NOT expect_ok AND (rc EQUAL 0 OR NOT err MATCHES "needs C11"))
    message(FATAL_ERROR "pinstage.h under -std=${std} should stop with 'needs C11':\n${err}")
  endif()
  message(STATUS "-std=${std}: as expected")
endfunction()
compile(ON ${CC} c11 ${WORK_DIR}/h.c)
compile(ON ${CC} c17 ${WORK_DIR}/h.c)
compile(OFF ${CC} c99 ${WORK_DIR}/h.c)
if(CXX)
  compile(ON ${CXX} c++11 ${WORK_DIR}/h.cpp)
  compile(ON ${CXX} c++17 ${WORK_DIR}/h.cpp)
endif()
