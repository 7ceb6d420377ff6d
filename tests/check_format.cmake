# Fails when a C++ source is not laid out as .clang-format says. The layout depends on
# clang-format's version, so the check runs with the major version the tree was formatted
# with (FORMAT_VERSION) and says "skipped:" otherwise (ctest counts that as skipped).
# Run as: cmake -DSOURCE_DIR=<repository> -DFORMAT_VERSION=14 -P check_format.cmake
find_program(CLANG_FORMAT NAMES clang-format-${FORMAT_VERSION} clang-format)
if(NOT CLANG_FORMAT)
  message("skipped: clang-format is not installed (scripts/setup.sh installs it)")
  return()
endif()
execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT version MATCHES "version ${FORMAT_VERSION}\\.")
  message("skipped: ${version} is not clang-format ${FORMAT_VERSION}, which the tree was formatted with")
  return()
endif()
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/tests/*.h ${SOURCE_DIR}/tests/*.cpp
     ${SOURCE_DIR}/bench/*.h ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/tools/*.h ${SOURCE_DIR}/tools/*.cpp
     ${SOURCE_DIR}/examples/*.h ${SOURCE_DIR}/examples/*.cpp)
# Files scripts/gen_ops.py writes are laid out by it (ctest's c.generated_ops_current checks them).
foreach(file IN LISTS files)
  file(STRINGS ${SOURCE_DIR}/${file} first LIMIT_COUNT 1)
  if(first MATCHES "^// Generated from src/ops/ops.toml")
    list(REMOVE_ITEM files ${file})
  endif()
endforeach()
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${files} WORKING_DIRECTORY ${SOURCE_DIR}
                RESULT_VARIABLE rc ERROR_VARIABLE complaints)
list(LENGTH files n)
if(NOT rc EQUAL 0)
  string(REGEX MATCHALL "[^\n]*error: code should be clang-formatted[^\n]*" first "${complaints}")
  message(FATAL_ERROR "not laid out as .clang-format says (run clang-format -i on them):\n${first}")
endif()
message(STATUS "${n} files laid out as .clang-format says (${version})")
