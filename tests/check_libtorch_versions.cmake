# Fails when code outside the compatibility layer (src/base/libtorch_compat.*) tests LibTorch's
# version itself (TORCH_VERSION_*), so that what differs between versions stays in one place.
file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/tests/*.h ${SOURCE_DIR}/tests/*.cpp
     ${SOURCE_DIR}/bench/*.h ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/tools/*.h ${SOURCE_DIR}/tools/*.cpp
     ${SOURCE_DIR}/examples/*.h ${SOURCE_DIR}/examples/*.cpp)
set(compat 0)
foreach(file IN LISTS sources)
  file(STRINGS ${SOURCE_DIR}/${file} hits REGEX "TORCH_VERSION_(MAJOR|MINOR|PATCH)")
  if(file MATCHES "^src/base/libtorch_compat\\.(h|cpp)$")
    list(LENGTH hits n)
    math(EXPR compat "${compat} + ${n}")
  elseif(hits)
    message(FATAL_ERROR "${file} tests LibTorch's version itself; put the difference in src/base/libtorch_compat.h")
  endif()
endforeach()
if(compat EQUAL 0)
  message(FATAL_ERROR "src/base/libtorch_compat.* tests no version: the check looks in the wrong place")
endif()
list(LENGTH sources n)
message(STATUS "${n} files checked: LibTorch's version is tested in src/base/libtorch_compat.* alone")
