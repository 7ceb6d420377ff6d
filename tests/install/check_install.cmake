# Installs the build into a fresh prefix and uses it as a user would:
#   LANGUAGE=c     (the default) builds and runs tests/install/consumer.c against the prefix
#                  twice: through pkg-config, and through find_package(koila)
#   LANGUAGE=java  javac + java against <prefix>/share/java/koila.jar and
#                  <prefix>/lib/libkoila_jni.so (which finds libkoila.so next to itself)
#   LANGUAGE=rust  cargo builds the crates with KOILA_PREFIX=<prefix> and runs the example;
#                  its rpath must point into the prefix
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DLANGUAGE=...] [-DC_COMPILER=...]
#         [-DJAVAC=... -DJAVA=...] [-DCARGO=...] -P check_install.cmake
if(NOT DEFINED LANGUAGE)
  set(LANGUAGE c)
endif()
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
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
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE libs ${prefix}/*/libkoila.so)
list(LENGTH libs n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one libkoila.so under ${prefix}, found: ${libs}")
endif()
get_filename_component(lib_dir ${libs} DIRECTORY)

if(LANGUAGE STREQUAL "c")
  if(NOT DEFINED C_COMPILER)
    message(FATAL_ERROR "C_COMPILER is not set")
  endif()
  file(GLOB_RECURSE pc_files ${prefix}/*/koila.pc)
  list(LENGTH pc_files n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one koila.pc under ${prefix}, found: ${pc_files}")
  endif()
  get_filename_component(pc_dir ${pc_files} DIRECTORY)

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

  # The koila command and its man page; the command finds libkoila.so in the prefix.
  foreach(file bin/koila share/man/man1/koila.1)
    if(NOT EXISTS ${prefix}/${file})
      message(FATAL_ERROR "cmake --install did not install ${file}")
    endif()
  endforeach()
  run("bin/koila --help" ${prefix}/bin/koila --help)
  if(NOT last_output MATCHES "^usage: koila plan")
    message(FATAL_ERROR "bin/koila --help printed: ${last_output}")
  endif()

  # find_package
  run("configure with find_package" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install -B ${WORK_DIR}/consumer_build
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER})
  run("build with find_package" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_build)
  run("run (find_package)" ${WORK_DIR}/consumer_build/consumer)
elseif(LANGUAGE STREQUAL "java")
  set(jar ${prefix}/share/java/koila.jar)
  if(NOT EXISTS ${jar} OR NOT EXISTS ${lib_dir}/libkoila_jni.so)
    message(FATAL_ERROR "the install lacks ${jar} or ${lib_dir}/libkoila_jni.so")
  endif()
  run("javac" ${JAVAC} -d ${WORK_DIR}/classes -cp ${jar} ${SOURCE_DIR}/bindings/java/install/Consumer.java)
  run("java" ${JAVA} -Djava.library.path=${lib_dir} -cp ${jar}:${WORK_DIR}/classes Consumer)
elseif(LANGUAGE STREQUAL "rust")
  set(ENV{KOILA_PREFIX} ${prefix})
  unset(ENV{KOILA_LIB_DIR})
  set(ENV{CARGO_TARGET_DIR} ${WORK_DIR}/target)
  run("cargo run --example mlp" ${CARGO} run --offline --manifest-path ${SOURCE_DIR}/bindings/rust/Cargo.toml
      -p koila --example mlp -- 32 1)
  run("readelf" readelf -d ${WORK_DIR}/target/debug/examples/mlp)
  string(FIND "${last_output}" "${lib_dir}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the example's rpath does not name ${lib_dir}:\n${last_output}")
  endif()
else()
  message(FATAL_ERROR "LANGUAGE must be c, java or rust, not ${LANGUAGE}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
