# SPDX-License-Identifier: MIT
# Installs pinstage into a temporary prefix, then builds and runs consumers
# the way other projects would, with no flags of their own:
#  1. find_package(pinstage): a C program and a C++17 program, shared and
#     static, with cuda.h included before and after pinstage.h where the
#     CUDA toolkit is present;
#  2. pkg-config and the plain compiler;
#  3. the static archive exports the public API alone;
#  4. a project that vendors pinstage with add_subdirectory builds only the
#     library and installs nothing of it.
# Inputs: SOURCE_DIR BUILD_DIR WORK_DIR CMAKE GENERATOR [CUDA_INCLUDE]
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/pinstage.h include/pinstage/pinstage_emu.h lib/libpinstage.a lib/pkgconfig/pinstage.pc
          lib/cmake/pinstage/pinstageConfig.cmake lib/libpinstage_emu.so bin/pinstage-bench
          share/doc/pinstage/LICENSE share/doc/pinstage/CHANGELOG.md)
  if(NOT EXISTS ${prefix}/${f})
    # GNUInstallDirs may pick lib64.
    string(REPLACE "lib/" "lib64/" f64 "${f}")
    if(NOT EXISTS ${prefix}/${f64})
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endif()
endforeach()
if(EXISTS ${prefix}/include/pinstage_emu.h)
  message(FATAL_ERROR "the emulator's header belongs under include/pinstage/")
endif()

# The installed bench starts from a prefix outside the loader's path, with
# the library it was installed with, and runs on the installed emulator.
file(GLOB _emu ${prefix}/lib*/libpinstage_emu.so)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH --unset=PINSTAGE_DRIVER
                        ${prefix}/bin/pinstage-bench --emulate --sizes 4K --paths pageable,auto --reps 3 --warmup 1 --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "auto")
  message(FATAL_ERROR "the installed pinstage-bench does not run from ${prefix}: ${rc}\n${out}\n${err}")
endif()

set(consumer ${WORK_DIR}/consumer)
file(MAKE_DIRECTORY ${consumer})
set(program [=[
#ifdef CUDA_BEFORE
#include <cuda.h>
#endif
#include <pinstage.h>
#ifdef CUDA_AFTER
#include <cuda.h>
#endif
#include <stdio.h>
#include <string.h>
int main(void) {
    float src[256], back[256];
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    for (int i = 0; i < 256; i++) src[i] = (float)i;
    if (pinstage_context_init(0) || pinstage_buffer_create(&buf) || pinstage_devbuf_alloc_f32(&d, 256) ||
        pinstage_buffer_upload_f32(buf, d, src, 256, NULL) || pinstage_buffer_download_f32(buf, back, 256, d, NULL)) {
        fprintf(stderr, "%s\n", pinstage_last_error_message());
        return 1;
    }
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
    printf("consumer %s: %s\n", pinstage_version_string(), memcmp(src, back, sizeof src) ? "FAIL" : "ok");
    return memcmp(src, back, sizeof src) != 0;
}
]=])
file(WRITE ${consumer}/main.c "${program}")
file(WRITE ${consumer}/main.cpp "${program}")
# The C11 selection by pointer type, in C only.
file(WRITE ${consumer}/generic.c [=[
#include <pinstage.h>
int main(void) {
    float f[4] = {0};
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    if (pinstage_context_init(0) || pinstage_buffer_create(&buf) || pinstage_devbuf_alloc_f32(&d, 4)) return 1;
    int rc = pinstage_upload(buf, d, (const float *)f, 4, NULL) || pinstage_download(buf, f, 4, d, NULL);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
    return rc;
}
]=])
# The emulator's control API, through the exported target and its header.
file(WRITE ${consumer}/uses_emu.c [=[
#include <pinstage_emu.h>
int main(void) { return pinstage_emu_version() < 1; }
]=])
set(cuda_cases NONE)
if(CUDA_INCLUDE)
  list(APPEND cuda_cases CUDA_BEFORE CUDA_AFTER)
endif()
file(WRITE ${consumer}/CMakeLists.txt "
cmake_minimum_required(VERSION 3.25)
project(consumer C CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(pinstage 0.4 REQUIRED)
if(NOT TARGET pinstage::emu OR NOT TARGET pinstage::pinstage OR NOT TARGET pinstage::pinstage_static)
  message(FATAL_ERROR \"the package lacks pinstage::pinstage, pinstage::pinstage_static or pinstage::emu\")
endif()
add_executable(uses_emu uses_emu.c)
target_link_libraries(uses_emu PRIVATE pinstage::emu)
foreach(case ${cuda_cases})
  foreach(kind pinstage pinstage_static)
    add_executable(c_\${case}_\${kind} main.c)
    add_executable(cxx_\${case}_\${kind} main.cpp)
    foreach(t c_\${case}_\${kind} cxx_\${case}_\${kind})
      target_link_libraries(\${t} PRIVATE pinstage::\${kind})
      target_compile_definitions(\${t} PRIVATE \${case})
      target_include_directories(\${t} PRIVATE ${CUDA_INCLUDE})
    endforeach()
  endforeach()
endforeach()
add_executable(generic generic.c)
target_link_libraries(generic PRIVATE pinstage::pinstage)
")

file(GLOB emu ${prefix}/lib*/libpinstage_emu.so)
set(ENV{PINSTAGE_DRIVER} ${emu})

# 1. find_package, C and C++17, shared and static, cuda.h before and after.
run(${CMAKE} -S ${consumer} -B ${consumer}/build -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE} --build ${consumer}/build)
foreach(case IN LISTS cuda_cases)
  foreach(kind pinstage pinstage_static)
    foreach(lang c cxx)
      run(${consumer}/build/${lang}_${case}_${kind})
      message(STATUS "find_package ${lang} ${kind} (${case}): ${last_output}")
    endforeach()
  endforeach()
endforeach()
run(${consumer}/build/generic)
run(${consumer}/build/uses_emu)

# 2. pkg-config, and the compiler's own default C standard.
find_program(PKG_CONFIG pkg-config REQUIRED)
find_program(CC NAMES cc gcc REQUIRED)
file(GLOB pcdir ${prefix}/lib*/pkgconfig)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
run(${PKG_CONFIG} --cflags --libs pinstage)
string(STRIP "${last_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
file(GLOB libdir ${prefix}/lib ${prefix}/lib64)
run(${CC} ${consumer}/main.c -o ${consumer}/consumer_pc ${flags} -Wl,-rpath,${libdir})
run(${consumer}/consumer_pc)
message(STATUS "pkg-config: ${last_output}")

# 3. The archive's global symbols are the public API's.
find_program(NM nm)
if(NM)
  file(GLOB archive ${prefix}/lib*/libpinstage.a)
  run(${NM} -g --defined-only ${archive})
  string(REGEX MATCHALL "\n[0-9a-f]+ [A-Z] [^\n]+" symbols "\n${last_output}")
  foreach(line IN LISTS symbols)
    string(REGEX REPLACE ".* [A-Z] " "" name "${line}")
    if(NOT name MATCHES "^pinstage_")
      message(FATAL_ERROR "libpinstage.a exports an internal symbol: ${name}")
    endif()
  endforeach()
  list(LENGTH symbols count)
  message(STATUS "libpinstage.a exports ${count} symbols, all pinstage_*")
endif()

# 4. Vendored: only the library is built, nothing of pinstage is installed.
set(vendor ${WORK_DIR}/vendor)
file(MAKE_DIRECTORY ${vendor})
file(WRITE ${vendor}/main.c "${program}")
file(WRITE ${vendor}/CMakeLists.txt "
cmake_minimum_required(VERSION 3.25)
project(vendor C)
add_subdirectory(${SOURCE_DIR} pinstage)
add_executable(app main.c)
target_link_libraries(app PRIVATE pinstage::pinstage)
install(TARGETS app RUNTIME DESTINATION bin)
")
run(${CMAKE} -S ${vendor} -B ${vendor}/build -G ${GENERATOR})
run(${CMAKE} --build ${vendor}/build)
run(${vendor}/build/app)
message(STATUS "vendored: ${last_output}")
foreach(unwanted pinstage-bench libpinstage_emu.so test_transfer frame_pipeline)
  file(GLOB_RECURSE found ${vendor}/build/pinstage/${unwanted} ${vendor}/build/pinstage/*/${unwanted})
  if(found)
    message(FATAL_ERROR "a vendored pinstage built ${unwanted}")
  endif()
endforeach()
run(${CMAKE} --install ${vendor}/build --prefix ${vendor}/prefix)
file(GLOB_RECURSE installed RELATIVE ${vendor}/prefix ${vendor}/prefix/*)
if(NOT installed STREQUAL "bin/app")
  message(FATAL_ERROR "a vendored pinstage installed more than the app: ${installed}")
endif()
message(STATUS "vendored install: ${installed}")
