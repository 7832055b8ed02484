# Installs pinstage into a temporary prefix, then builds and runs a tiny
# consumer twice: with find_package(pinstage) and with pkg-config.
# Inputs: SOURCE_DIR BUILD_DIR WORK_DIR CMAKE GENERATOR
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
foreach(f include/pinstage.h lib/libpinstage.a lib/pkgconfig/pinstage.pc
          lib/cmake/pinstage/pinstageConfig.cmake lib/libpinstage_emu.so bin/pinstage-bench)
  if(NOT EXISTS ${prefix}/${f})
    # GNUInstallDirs may pick lib64.
    string(REPLACE "lib/" "lib64/" f64 "${f}")
    if(NOT EXISTS ${prefix}/${f64})
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endif()
endforeach()

set(consumer ${WORK_DIR}/consumer)
file(MAKE_DIRECTORY ${consumer})
file(WRITE ${consumer}/main.c [=[
#include <pinstage.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    float src[256], back[256];
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    for (int i = 0; i < 256; i++) src[i] = (float)i;
    if (pinstage_context_init(0) || pinstage_buffer_create(&buf) || pinstage_devbuf_alloc_f32(&d, 256) ||
        pinstage_upload(buf, d, (const float *)src, 256, NULL) || pinstage_download(buf, back, 256, d, NULL)) {
        fprintf(stderr, "%s\n", pinstage_last_error_message());
        return 1;
    }
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
    printf("consumer %s: %s\n", pinstage_version_string(), memcmp(src, back, sizeof src) ? "FAIL" : "ok");
    return memcmp(src, back, sizeof src) != 0;
}
]=])
file(WRITE ${consumer}/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(pinstage 0.1 REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE pinstage::pinstage)
add_executable(consumer_static main.c)
target_link_libraries(consumer_static PRIVATE pinstage::pinstage_static)
]=])

file(GLOB emu ${prefix}/lib*/libpinstage_emu.so)
set(ENV{PINSTAGE_DRIVER} ${emu})

# 1. find_package
run(${CMAKE} -S ${consumer} -B ${consumer}/build -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE} --build ${consumer}/build)
run(${consumer}/build/consumer)
message(STATUS "find_package shared: ${last_output}")
run(${consumer}/build/consumer_static)
message(STATUS "find_package static: ${last_output}")

# 2. pkg-config
find_program(PKG_CONFIG pkg-config REQUIRED)
find_program(CC NAMES cc gcc REQUIRED)
file(GLOB pcdir ${prefix}/lib*/pkgconfig)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
run(${PKG_CONFIG} --cflags --libs pinstage)
string(STRIP "${last_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
file(GLOB libdir ${prefix}/lib ${prefix}/lib64)
run(${CC} -std=c11 ${consumer}/main.c -o ${consumer}/consumer_pc ${flags} -Wl,-rpath,${libdir})
run(${consumer}/consumer_pc)
message(STATUS "pkg-config: ${last_output}")
