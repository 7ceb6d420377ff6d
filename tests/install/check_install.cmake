# Installs the build into a fresh prefix, then builds and runs tests/install/consumer.c
# against that prefix twice: through pkg-config, and through find_package(koila).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DC_COMPILER=... -P check_install.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR C_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok ${out}")
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

file(GLOB_RECURSE pc_files ${prefix}/*/koila.pc)
list(LENGTH pc_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one koila.pc under ${prefix}, found: ${pc_files}")
endif()
get_filename_component(pc_dir ${pc_files} DIRECTORY)
get_filename_component(lib_dir ${pc_dir} DIRECTORY)

# pkg-config
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --cflags --libs koila RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs koila failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run("build with pkg-config" ${C_COMPILER} -std=c99 -pedantic -Wall -Werror ${SOURCE_DIR}/tests/install/consumer.c
    ${flags} -Wl,-rpath,${lib_dir} -o ${WORK_DIR}/consumer_pkgconfig)
run("run (pkg-config)" ${WORK_DIR}/consumer_pkgconfig)

# find_package
run("configure with find_package" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install -B ${WORK_DIR}/consumer_build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER})
run("build with find_package" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_build)
run("run (find_package)" ${WORK_DIR}/consumer_build/consumer)
file(REMOVE_RECURSE ${WORK_DIR})
